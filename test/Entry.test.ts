/**
 * The package's entries: importing `pagantic` loads no native binding and no
 * OpenTelemetry SDK (those live behind `pagantic/llama` and `pagantic/telemetry`),
 * checked in a fresh process that records every module it resolves.
 */
import { execFile } from "node:child_process"
import * as path from "node:path"
import { promisify } from "node:util"
import { describe, expect, it } from "vitest"

const run = promisify(execFile)
const root = path.resolve(import.meta.dirname, "..")

/** Every module URL resolved while `entry` (a file under src/) loads, in a fresh Node process. */
const loaded = async (entry: string): Promise<ReadonlyArray<string>> => {
  const { stdout } = await run(
    process.execPath,
    ["--import", "tsx", path.join(root, "test/support/loads.mjs"), path.join(root, "src", entry)],
    { cwd: root, timeout: 60_000, maxBuffer: 64 * 1024 * 1024 }
  )
  return JSON.parse(stdout) as ReadonlyArray<string>
}

const native = (urls: ReadonlyArray<string>) => urls.filter((u) => u.includes("/node_modules/node-llama-cpp/"))
const otelSdk = (urls: ReadonlyArray<string>) => urls.filter((u) => /\/node_modules\/@opentelemetry\/sdk-/.test(u))

describe("entries", () => {
  it("importing pagantic loads neither node-llama-cpp nor an OpenTelemetry SDK", async () => {
    const urls = await loaded("index.ts")
    // the recorder works: effect and our own modules are seen
    expect(urls.some((u) => u.includes("/node_modules/effect/"))).toBe(true)
    expect(urls.some((u) => u.endsWith("/src/programs/AgentLoop.ts"))).toBe(true)
    expect(native(urls)).toEqual([])
    expect(otelSdk(urls)).toEqual([])
  }, 90_000)

  it("pagantic/llama and pagantic/telemetry are where they load (the check can fail)", async () => {
    expect(native(await loaded("llama.ts")).length).toBeGreaterThan(0)
    expect(otelSdk(await loaded("telemetry.ts")).length).toBeGreaterThan(0)
  }, 120_000)
})
