/**
 * `npm run test:quick`, the edit loop: the in-process suites only. A file that
 * starts processes (the CLI, crash children), a Postgres or a browser is left
 * to `npm test`; which ones is read from what each file imports, so a new heavy
 * file is left out without a list to keep.
 */
import * as fs from "node:fs"
import { defineConfig } from "vitest/config"
import base from "./vitest.config.js"

/** What a heavy file imports: a subprocess, the shared Postgres, a browser. */
const heavy = /node:child_process|support\/postgres|puppeteer|-spawn\.js|support\/child\.js|support\/loads/

const files = fs.readdirSync("test").filter((f) => f.endsWith(".test.ts"))
const left = files.filter((f) => heavy.test(fs.readFileSync(`test/${f}`, "utf8")))

// not mergeConfig: it would add to the base's globalSetup (the shared Postgres), not replace it
const { globalSetup: _, ...test } = base.test ?? {}

export default defineConfig({
  ...base,
  test: { ...test, exclude: left.map((f) => `test/${f}`), globalSetup: ["test/support/leftovers-global.ts"] }
})
