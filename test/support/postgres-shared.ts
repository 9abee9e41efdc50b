/**
 * What a test file reads of the run's one Postgres (see postgres-global.ts);
 * apart from postgres.ts, which the benches import outside vitest.
 */
import { inject } from "vitest"
import type { Postgres } from "./postgres.js"

/**
 * The run's shared Postgres (`postgres-global.ts` starts it once for every file
 * that needs one), or why there is none. With `CI=true` there must be one: a
 * Postgres that cannot start fails the file instead of skipping its cases.
 */
export const shared = (): Postgres | { readonly skipped: string } => {
  const provided = inject("postgres")
  if ("skipped" in provided) {
    if (process.env.CI === "true") throw new Error(`CI=true and no Postgres for the Postgres cases: ${provided.skipped}`)
    return provided
  }
  // the run's own: stopped after every file is done, not by one of them
  return { ...provided, stop: () => Promise.resolve() }
}

