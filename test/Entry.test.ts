/**
 * The package's entries: importing `pagantic` loads no native binding, no
 * OpenTelemetry SDK and no durable engine (those live behind `pagantic/llama`,
 * `pagantic/telemetry` and `pagantic/durable`), checked in a fresh process that
 * records every module it resolves.
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
const effectAi = (urls: ReadonlyArray<string>) => urls.filter((u) => u.includes("/node_modules/@effect/ai/"))
const durable = (urls: ReadonlyArray<string>) =>
  urls.filter((u) => /\/node_modules\/(@effect\/(workflow|cluster|sql|sql-sqlite-node|sql-pg)|better-sqlite3)\//.test(u))

describe("entries", () => {
  it("importing pagantic loads neither node-llama-cpp, nor an OpenTelemetry SDK, nor the durable engine", async () => {
    const urls = await loaded("index.ts")
    // the recorder works: effect and our own modules are seen
    expect(urls.some((u) => u.includes("/node_modules/effect/"))).toBe(true)
    expect(urls.some((u) => u.endsWith("/src/programs/AgentLoop.ts"))).toBe(true)
    expect(native(urls)).toEqual([])
    expect(otelSdk(urls)).toEqual([])
    expect(durable(urls)).toEqual([])
    // @effect/ai is an optional peer: only pagantic/effect-ai loads it
    expect(effectAi(urls)).toEqual([])
  }, 90_000)

  it("pagantic/llama, pagantic/telemetry and pagantic/durable are where they load (the check can fail)", async () => {
    expect(native(await loaded("llama.ts")).length).toBeGreaterThan(0)
    expect(otelSdk(await loaded("telemetry.ts")).length).toBeGreaterThan(0)
    const durableUrls = await loaded("durable.ts")
    expect(durable(durableUrls).length).toBeGreaterThan(0)
    // the Postgres driver is an optional peer, loaded only when a PostgresRuns layer is built
    expect(durableUrls.filter((u) => u.includes("/node_modules/@effect/sql-pg/"))).toEqual([])
    expect(durableUrls.some((u) => u.includes("/node_modules/@effect/sql-sqlite-node/"))).toBe(true)
    expect(effectAi(await loaded("effectAi.ts")).length).toBeGreaterThan(0)
  }, 240_000)
})
