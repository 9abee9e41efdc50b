/**
 * `npm run test:quick`, the edit loop: the in-process suites only. A file that
 * starts processes (the CLI, crash children), a Postgres, a browser or the real
 * model (llama.cpp) is left to `npm test`, and the HTTP fuzz runs an eighth of
 * its cases; which ones is read from what each file imports, so a new heavy
 * file is left out without a list to keep.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { defineConfig } from "vitest/config"
import base from "./vitest.config.js"

/** What a heavy file imports: a subprocess, the shared Postgres, a browser, the real model. */
const heavy = /node:child_process|support\/postgres|puppeteer|-spawn\.js|support\/child\.js|support\/loads|layers\/LlamaEngine|LlamaGrammarChecker|node-llama-cpp|pagantic\/llama/

/** Whether `file` or a test helper it imports (transitively: `./support/...`) is heavy. */
const isHeavy = (file: string, seen: Set<string> = new Set()): boolean => {
  if (seen.has(file) || !fs.existsSync(file)) return false
  seen.add(file)
  const text = fs.readFileSync(file, "utf8")
  if (heavy.test(text)) return true
  const helpers = [...text.matchAll(/from "(\.{1,2}\/[^"]+)\.js"/g)]
    .map((m) => path.join(path.dirname(file), `${m[1]}.ts`))
    .filter((f) => f.startsWith("test/"))
  return helpers.some((f) => isHeavy(f, seen))
}

const files = fs.readdirSync("test").filter((f) => f.endsWith(".test.ts"))
const left = files.filter((f) => isHeavy(`test/${f}`))

// not mergeConfig: it would add to the base's globalSetup (the shared Postgres), not replace it
const { globalSetup: _, ...test } = base.test ?? {}

export default defineConfig({
  ...base,
  test: {
    ...test,
    env: { FUZZ_CASES: process.env["FUZZ_CASES"] ?? "250" },
    exclude: left.map((f) => `test/${f}`),
    globalSetup: ["test/support/leftovers-global.ts"]
  }
})
