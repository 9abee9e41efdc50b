/**
 * One throwaway Postgres for every test file that needs one (vitest's
 * globalSetup): started once before the files run, stopped after them, its URL
 * handed to the files as `inject("postgres")` (`Postgres.shared()` reads it).
 * Each file makes its own databases on it. When the files selected on the
 * command line name none of those files, none is started.
 */
import type { TestProject } from "vitest/node"
import * as Postgres from "./postgres.js"

/** The test files that use the shared Postgres (by name, as `vitest run <filter>` matches them). */
const users = ["CliPostgres.test.ts", "CliPostgresClient.test.ts", "CliPostgresRespond.test.ts", "PostgresRuns.test.ts"]

/**
 * Whether the files filtered on the command line include one that needs
 * Postgres (no filter: every file). The filters are vitest's own (`filenamePattern`,
 * marked internal but the only place they are kept); without them, start one.
 */
const wanted = (project: TestProject): boolean => {
  const filters = (project.vitest as unknown as { readonly filenamePattern?: ReadonlyArray<string> }).filenamePattern
  return filters === undefined || filters.length === 0 ||
    users.some((file) => filters.some((f) => `test/${file}`.includes(f.replace(/^\.\//, ""))))
}

export default async function setup(project: TestProject) {
  if (!wanted(project)) {
    project.provide("postgres", { skipped: "not started: no selected file uses it" })
    return
  }
  // once for the whole run, on a machine that may be busy: a longer bound than one file's
  const server = await Postgres.start({ timeoutMs: 180_000 })
  project.provide("postgres", "skipped" in server ? { skipped: server.skipped } : { url: server.url, port: server.port, dir: server.dir })
  return async () => {
    if (!("skipped" in server)) await server.stop()
  }
}

declare module "vitest" {
  export interface ProvidedContext {
    postgres: { readonly url: string; readonly port: number; readonly dir: string } | { readonly skipped: string }
  }
}
