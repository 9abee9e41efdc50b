/**
 * `pagantic trace show FILE` (cli/commands/Trace.ts, http/PageTrace.ts): a trace
 * written by a live server (the body of GET /v1/events) or as JSON lines with a
 * durable run becomes one self-contained HTML file: style, script and data inline
 * under a hash-only Content-Security-Policy, markup in the data escaped so it can
 * neither end the data block nor become an element. Opened from disk in headless
 * Chromium it draws the requests (the failed tool's error, the vote's replicas, a
 * request that failed: a plan step's bar, its failed inference and its ERROR) and the run, and asks the network for nothing. Bad trace files are refused
 * naming the line and field.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import * as Cli from "../src/adapters/Cli.js"
import { defaultOutput } from "../src/adapters/cli/commands/Trace.js"
import { scriptSafeJson } from "../src/adapters/http/Page.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Engine } from "../src/services/Engine.js"
import * as Tool from "../src/services/ToolRegistry.js"
import { post, send, serve } from "./support/server.js"

declare const document: any

const PLANT = `</script><img src=x onerror="window.__pwned=1">`

const lookup = Tool.make({
  name: "lookup",
  description: "Looks a word up",
  parameters: Schema.Struct({ query: Schema.String }),
  handler: ({ query }) => Effect.fail(`no entry for ${query}`)
})

const tempDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-trace-"))

/** The CLI in process: what it printed, and its exit. */
const runCli = (args: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const out = yield* Ref.make("")
    const err = yield* Ref.make<ReadonlyArray<string>>([])
    const io = Cli.CliIo.of({
      write: (text) => Ref.update(out, (o) => o + text),
      error: (line) => Ref.update(err, (e) => [...e, line]),
      readLine: () => Effect.succeed(Option.none()),
      colors: false
    })
    const engines = Cli.CliEngine.of({ make: () => Layer.die("trace show loads no model") as Layer.Layer<Engine> })
    const exit = yield* Effect.exit(
      Cli.run(["node", "pagantic", ...args]).pipe(
        Effect.provideService(Cli.CliIo, io),
        Effect.provideService(Cli.CliEngine, engines),
        Effect.provide(NodeContext.layer)
      )
    )
    return { exit, out: yield* Ref.get(out), err: yield* Ref.get(err) }
  })

/** A trace as a live server writes it: GET /v1/events after a chat with a failing tool and a vote. */
const recordedTrace = Effect.scoped(
  Effect.gen(function* () {
    const server = yield* serve({
      engine: ScriptedEngine.layer([
        ScriptedEngine.toolCalls([{ name: "lookup", arguments: { query: PLANT } }]),
        ScriptedEngine.reply("nothing found"),
        ScriptedEngine.reply(JSON.stringify({ word: PLANT })),
        ScriptedEngine.reply(JSON.stringify({ word: "other" })),
        ScriptedEngine.reply(JSON.stringify({ word: PLANT }))
      ]),
      tools: [lookup]
    })
    const chat = yield* post(`${server.url}/v1/run`, {
      requestId: "trace-chat",
      mode: "chat",
      messages: [{ role: "user", content: PLANT }],
      tools: ["lookup"]
    })
    expect(chat.status).toBe(200)
    const vote = yield* post(`${server.url}/v1/run`, {
      requestId: "trace-vote",
      mode: "redundant",
      messages: [{ role: "user", content: PLANT }],
      output: { schema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] } },
      redundancy: { n: 3 }
    })
    expect(vote.status).toBe(200)
    const events = yield* send(`${server.url}/v1/events`)
    expect(events.status).toBe(200)
    return events.text
  })
)

const runLine = JSON.stringify({
  _tag: "Run",
  run: {
    id: "approval-1",
    definition: "approval",
    status: "suspended",
    waitingOn: "review",
    createdAt: "2026-01-01T10:00:00.000Z",
    updatedAt: "2026-01-01T10:00:02.000Z"
  },
  records: [
    { runId: "approval-1", seq: 1, kind: "INTEND", key: "payload", at: "2026-01-01T10:00:00.000Z", body: { note: PLANT } },
    { runId: "approval-1", seq: 2, kind: "CALL", key: "review", at: "2026-01-01T10:00:01.000Z", body: { slot: "review" } }
  ]
})

/** A request that failed: its inference errored and it ended in ERROR (as the facade records it). */
const failedLines = (() => {
  const c = { requestId: "trace-fail" }
  const t = 1_767_261_600_000
  return [
    { _tag: "LifecycleTransition", timestamp: t, layer: "orchestrate", correlation: c, fromState: "INIT", toState: "PREPARE", attempt: 1, reason: "checked" },
    { _tag: "LifecycleTransition", timestamp: t + 5, layer: "orchestrate", correlation: c, fromState: "PREPARE", toState: "EXECUTE", attempt: 1, reason: "prepared" },
    { _tag: "InferenceStart", timestamp: t + 6, layer: "inference", correlation: c, inferenceId: "inf-1", messageCount: 1, toolDefsCount: 0, schemaPresent: false, grammarPresent: false },
    { _tag: "InferenceEnd", timestamp: t + 90, layer: "inference", correlation: c, inferenceId: "inf-1", durationMs: 84, tokensIn: 0, tokensOut: 0, finishReason: "error", toolCallCount: 0, errorCode: "INFERENCE_CONTEXT_EXCEEDED", error: `the prompt needs 5000 tokens ${PLANT}` },
    { _tag: "Custom", timestamp: t + 60, layer: "orchestrate", correlation: c, action: "plan.step.end", durationMs: 40, data: { step: "fetch", type: "tool" } },
    { _tag: "LifecycleTransition", timestamp: t + 91, layer: "orchestrate", correlation: c, fromState: "EXECUTE", toState: "ERROR", attempt: 1, reason: "the prompt needs 5000 tokens; the context holds 4096" }
  ].map((e) => JSON.stringify(e))
})()

const chromium = (): string | undefined => {
  for (const p of [process.env.CHROMIUM_PATH, "/usr/bin/chromium", "/usr/bin/chromium-browser"]) {
    if (p !== undefined && p !== "" && fs.existsSync(p)) return p
  }
  try {
    return execFileSync("which", ["chromium"], { encoding: "utf8" }).trim() || undefined
  } catch {
    return undefined
  }
}

describe("pagantic trace show", () => {
  it.live("a server's GET /v1/events becomes one self-contained page; the data cannot end its block", () =>
    Effect.gen(function* () {
      const dir = tempDir()
      const file = path.join(dir, "trace.json")
      fs.writeFileSync(file, yield* recordedTrace)
      const run = yield* runCli(["trace", "show", file])
      expect(run.err).toEqual([])
      expect(Exit.isSuccess(run.exit)).toBe(true)
      const output = path.join(dir, "trace.html")
      expect(run.out).toMatch(/^wrote .*trace\.html \(\d+ events, 0 runs\): open it in a browser\n$/)
      const html = fs.readFileSync(output, "utf8")
      // self-contained: nothing loaded from anywhere, scripts allowed by hash only
      expect(html).not.toMatch(/<script[^>]+src=|<link|https?:\/\//)
      expect(html).toMatch(/<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'sha256-[A-Za-z0-9+/=]+'; style-src 'sha256-/)
      // the planted markup only ever appears escaped inside the data block
      expect(html).not.toContain("</script><img")
      expect(html.match(/<\/script>/g)).toHaveLength(2)
      const data = /<script type="application\/json" id="pagantic-trace">([^<]*)<\/script>/.exec(html)
      expect(data).not.toBeNull()
      const trace = JSON.parse(data![1]!)
      const ids = new Set(trace.events.map((e: { correlation: { requestId: string } }) => e.correlation.requestId))
      expect(ids).toEqual(new Set(["trace-chat", "trace-vote"]))
      const vote = trace.events.find((e: { _tag: string; action?: string }) => e._tag === "Custom" && e.action === "vote")
      expect(vote.data.replicas.map((r: { answer: string }) => r.answer)).toEqual([
        JSON.stringify({ word: PLANT }),
        JSON.stringify({ word: "other" }),
        JSON.stringify({ word: PLANT })
      ])
    }), { timeout: 60_000 })

  it("the data block escapes what could end it", () => {
    expect(scriptSafeJson({ a: "</script><!--&\u2028" })).toBe('{"a":"\\u003c/script\\u003e\\u003c!--\\u0026\\u2028"}')
    expect(JSON.parse(scriptSafeJson({ a: "</script><!--&\u2028" }))).toEqual({ a: "</script><!--&\u2028" })
    expect(defaultOutput("t/trace.jsonl")).toBe("t/trace.html")
    expect(defaultOutput("trace")).toBe("trace.html")
    expect(defaultOutput("page.html")).toBe("page.html.html")
  })

  it.live("a bad trace file is refused naming where; nothing is written", () =>
    Effect.gen(function* () {
      const dir = tempDir()
      const write = (name: string, text: string) => {
        const file = path.join(dir, name)
        fs.writeFileSync(file, text)
        return file
      }
      const good = JSON.stringify({ _tag: "Custom", timestamp: 1, layer: "x", correlation: { requestId: "r" }, action: "a", data: {} })
      const cases: ReadonlyArray<readonly [string, RegExp]> = [
        [write("empty.jsonl", "  \n"), /is not a trace: the file: it is empty/],
        [write("garbage.jsonl", `${good}\n\n{"_tag": "Custom", oops\n`), /is not a trace: line 3: not JSON: "\{\\"_tag\\": \\"Custom\\", oops"/],
        [write("field.jsonl", `${good}\n${JSON.stringify({ _tag: "ToolEnd", timestamp: 1, layer: "tool", correlation: { requestId: "r" } })}\n`), /line 2: not an event: toolName: is missing; toolCallId: is missing/],
        [write("array.jsonl", "[1,2]\n"), /line 1: expected a JSON object/],
        [write("run.jsonl", `${good}\n${JSON.stringify({ _tag: "Run", run: { id: "x" }, records: [] })}\n`), /line 2, run: not a run: .*definition/],
        [write("record.jsonl", `${JSON.stringify({ _tag: "Run", run: JSON.parse(runLine).run, records: [{ seq: 1 }] })}\n`), /line 1, records\[0\]: not a thread record/],
        [write("events.json", JSON.stringify({ events: [JSON.parse(good), { _tag: "Nope" }] })), /events\[1\]: not an event: _tag: expected one of InferenceStart, .*, Run, got "Nope"/],
        [path.join(dir, "missing.json"), /cannot read the trace file .*missing\.json: no such file/]
      ]
      for (const [file, message] of cases) {
        const run = yield* runCli(["trace", "show", file])
        expect(Exit.isFailure(run.exit), file).toBe(true)
        expect(run.err, file).toHaveLength(1)
        expect(run.err[0], file).toMatch(message)
        expect(fs.existsSync(defaultOutput(file)), file).toBe(false)
      }
      const same = write("same.html", good)
      const refused = yield* runCli(["trace", "show", same, "--output", same])
      expect(refused.err).toEqual([`error: --output ${same} is the trace file itself`])
      expect(fs.readFileSync(same, "utf8")).toBe(good)
    }), { timeout: 60_000 })

  it.live("the page opened from disk in Chromium draws the trace, asks the network for nothing, and keeps markup as text", () =>
    Effect.gen(function* () {
      const dir = tempDir()
      const events = JSON.parse(yield* recordedTrace).events as ReadonlyArray<unknown>
      const file = path.join(dir, "trace.jsonl")
      fs.writeFileSync(file, [...events.map((e) => JSON.stringify(e)), ...failedLines, runLine].join("\n") + "\n")
      const output = path.join(dir, "page.html")
      const run = yield* runCli(["trace", "show", file, "-o", output])
      expect(run.err).toEqual([])
      expect(run.out).toContain(`(${events.length + failedLines.length} events, 1 runs)`)

      const result = yield* Effect.acquireUseRelease(
        Effect.promise(async () => {
          const puppeteer = await import("puppeteer-core")
          const executablePath = chromium()
          if (executablePath === undefined) throw new Error("no chromium: install Debian's chromium or set CHROMIUM_PATH")
          return puppeteer.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu"], protocolTimeout: 30_000 })
        }).pipe(Effect.timeout("30 seconds"), Effect.orDie),
        (browser) =>
          Effect.promise(async () => {
            const page = await browser.newPage()
            page.setDefaultTimeout(15_000)
            const urls: Array<string> = []
            const errors: Array<string> = []
            page.on("request", (r) => void urls.push(r.url()))
            page.on("pageerror", (e) => void errors.push(String(e)))
            page.on("console", (m) => {
              if (m.type() === "error") errors.push(m.text())
            })
            await page.goto(pathToFileURL(output).href, { waitUntil: "load" })
            await page.waitForSelector(`li[data-kind="request"][data-id="trace-chat"]`)
            const notice = await page.$eval("#notice", (n: any) => n.textContent)
            await page.$eval(`li[data-kind="request"][data-id="trace-chat"]`, (n: any) => n.click())
            await page.waitForSelector(`.row.tool[data-tool="lookup"] .error`)
            const toolError = await page.$eval(`.row.tool[data-tool="lookup"] .error`, (n: any) => n.textContent)
            await page.$eval(`li[data-kind="request"][data-id="trace-vote"]`, (n: any) => n.click())
            await page.waitForFunction(() => document.querySelectorAll(".vote .replica").length === 3)
            const answers = await page.$$eval(".vote .replica .answer", (ns: Array<any>) => ns.map((n) => n.textContent))
            await page.$eval(`li[data-kind="request"][data-id="trace-fail"]`, (n: any) => n.click())
            await page.waitForSelector(".row.inference .bar.failed")
            const failed = {
              status: await page.$eval(`li[data-kind="request"][data-id="trace-fail"] .status`, (n: any) => n.textContent),
              inference: await page.$eval(".row.inference .error", (n: any) => n.textContent),
              states: await page.$$eval(".band[data-state]", (ns: Array<any>) => ns.map((n) => n.getAttribute("data-state"))),
              ended: await page.$eval(".request-error", (n: any) => n.textContent),
              steps: await page.$$eval(".row.step .label", (ns: Array<any>) => ns.map((n) => n.textContent))
            }
            await page.$eval(`li[data-kind="run"][data-id="approval-1"]`, (n: any) => n.click())
            await page.waitForSelector(".waiting-slot")
            const waiting = await page.$eval(".waiting-slot h3", (n: any) => n.textContent)
            const images = await page.$$eval("img", (ns: Array<any>) => ns.length)
            fs.mkdirSync("test-artifacts", { recursive: true })
            await page.screenshot({ path: "test-artifacts/trace-show.png", fullPage: true })
            return { notice, toolError, answers, failed, waiting, images, urls, errors }
          }).pipe(Effect.timeout("60 seconds"), Effect.orDie),
        (browser) => Effect.promise(() => browser.close()).pipe(Effect.timeout("10 seconds"), Effect.ignore)
      )
      expect(result.notice).toBe(`trace file: ${events.length + failedLines.length} events, 1 runs`)
      expect(result.toolError).toBe(`TOOL_EXECUTION_FAILED: Tool "lookup" failed: no entry for ${PLANT}`)
      expect(result.answers.filter((a: string) => a === JSON.stringify({ word: PLANT }))).toHaveLength(2)
      expect(result.failed).toEqual({
        status: "failed",
        inference: `INFERENCE_CONTEXT_EXCEEDED: the prompt needs 5000 tokens ${PLANT}`,
        states: ["PREPARE", "EXECUTE", "ERROR"],
        ended: "ERROR: the prompt needs 5000 tokens; the context holds 4096",
        steps: ["plan.step.end fetch · 40 ms"]
      })
      expect(result.waiting).toBe("waiting on the human slot review")
      expect(result.images).toBe(0)
      expect(result.errors).toEqual([])
      expect(result.urls).toEqual([pathToFileURL(output).href])
    }), { timeout: 120_000 })
})
