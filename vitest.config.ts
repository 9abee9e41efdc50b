import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const src = (file: string) => fileURLToPath(new URL(`./src/${file}`, import.meta.url))

export default defineConfig({
  // the package's own name resolves to its sources, as tsconfig's paths say (examples import "pagantic")
  resolve: {
    alias: [
      { find: /^pagantic$/, replacement: src("index.ts") },
      { find: /^pagantic\/(.*)$/, replacement: src("$1.ts") }
    ]
  },
  test: {
    include: ["test/**/*.test.ts"],
    // one Postgres for the files that need one; no process outlives its test
    globalSetup: ["test/support/postgres-global.ts", "test/support/leftovers-global.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // vitest's default for a run is one worker fewer than the cores: on two cores that is one file at a time
    maxWorkers: 2,
    minWorkers: 2,
    reporters: ["default"]
  }
})
