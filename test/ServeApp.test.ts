/**
 * `pagantic serve --app FILE` (a subprocess, the bundled model, a SQLite state
 * file): an application's durable definition started by name at POST /v1/runs,
 * and a query whose responder is the application's human, told in its inbox and
 * answered at its slot, the answer committed. A module that is not an App, or
 * cannot be loaded, stops serve before it listens, naming --app.
 */
import { describe, expect, it } from "vitest"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as ServeLog from "./support/serve-log.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const launcher = path.join(root, "bin", "pagantic.js")
const appFile = path.join(root, "test", "fixtures", "app.ts")
const badAppFile = path.join(root, "test", "fixtures", "app-bad.ts")
const home = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-serve-app-"))
const env = { ...process.env, NO_COLOR: "1", PAGANTIC_PORT: "0", PAGANTIC_HOME: home, PAGANTIC_STATE_URL: "", PAGANTIC_STATE: "" }

const launch = (args: ReadonlyArray<string>): Promise<{ code: number | null; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    execFile(process.execPath, [launcher, ...args], { cwd: root, timeout: 40_000, env }, (error, stdout, stderr) =>
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr }))
  })

const serve = (args: ReadonlyArray<string>) => ServeLog.spawnServe(launcher, ["--threads", "1", "--no-auth", ...args], { cwd: root, env })

const call = async (url: string, body?: unknown) => {
  const reply = await fetch(url, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(10_000)
  })
  const text = await reply.text()
  return { status: reply.status, text, json: text === "" ? undefined : JSON.parse(text) }
}

/** The run once it is `status`, polled every 100 ms for at most 20 s. */
const until = async (address: string, id: string, status: string) => {
  for (let i = 0; i < 200; i++) {
    const run = await call(`${address}/v1/runs/${id}`)
    if (run.json?.status === status) return run.json
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`run ${id} never ${status}`)
}

/** The first `slot` event of a responder's inbox (server-sent events), within 20 s. */
const firstSlot = async (address: string, responder: string) => {
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), 20_000)
  try {
    const reply = await fetch(`${address}/v1/responders/${responder}/inbox`, { signal: controller.signal })
    expect(reply.status).toBe(200)
    const decoder = new TextDecoder()
    let text = ""
    for await (const chunk of reply.body!) {
      text += decoder.decode(chunk as Uint8Array, { stream: true })
      const event = /event: slot\ndata: (.*)\n/.exec(text)
      if (event !== null) return JSON.parse(event[1]!)
    }
    throw new Error(`the inbox ended without a slot: ${text}`)
  } finally {
    clearTimeout(timer)
    controller.abort()
  }
}

const humanQuery = {
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "actor", did: "did:example:reviewer" }],
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
}

describe("pagantic serve --app", () => {
  it("serves the app's definition by name and its human responder, who answers from the inbox", async () => {
    const server = serve(["--app", appFile, "--state", path.join(home, "state.db")])
    try {
      const address = await server.listening

      const started = await call(`${address}/v1/runs`, { definition: "restock", input: { sku: "A-1" } })
      expect(started.status, started.text).toBe(202)
      expect((await until(address, started.json.id, "completed")).result).toEqual({ ordered: 30 })
      const bad = await call(`${address}/v1/runs`, { definition: "restock", input: { sku: 1 } })
      expect(bad.status).toBe(400)
      expect(bad.json.error.details.field).toBe("input.sku")

      const asked = await call(`${address}/v1/queries`, humanQuery)
      expect(asked.status, asked.text).toBe(202)
      const runId: string = asked.json.query.runId
      const slot = await firstSlot(address, "reviewer")
      expect(slot).toMatchObject({ responder: "reviewer", runId, answerShape: humanQuery.answer_shape })
      const answered = await call(`${address}${slot.links.respond}`, {
        response: { kind: "submit", answer: { kind: "core.classification.v1", category: "research" } }
      })
      expect(answered.status, answered.text).toBe(200)
      const done = await until(address, runId, "completed")
      expect(done.result).toMatchObject({ kind: "KNOW", body: { category: "research" } })
    } finally {
      await server.stop()
    }
  }, 120_000)

  it("a module that is no App, cannot be found, or is CommonJS stops serve before it listens, naming --app", async () => {
    const bad = await launch(["serve", "--no-auth", "--app", badAppFile])
    expect(bad.code).toBe(1)
    expect(bad.stderr).toContain("error: CONFIG_INVALID_REQUEST: --app")
    expect(bad.stderr).toContain("tools[0] is not a tool")
    expect(bad.stdout + bad.stderr).not.toContain("Listening on")
    const missing = await launch(["serve", "--no-auth", "--app", path.join(home, "nowhere.js")])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toContain("cannot load it")
    // a .js file outside a "type": "module" package is CommonJS to node
    const commonJs = path.join(home, "app.js")
    fs.writeFileSync(commonJs, `import * as fs from "node:fs"\nexport default {}\n`)
    const cjs = await launch(["serve", "--no-auth", "--app", commonJs])
    expect(cjs.code).toBe(1)
    expect(cjs.stderr).toContain(`an App is an ES module: name it .mjs, or set "type": "module" in its package.json`)
  }, 90_000)
})
