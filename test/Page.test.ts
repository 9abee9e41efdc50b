/**
 * The runs page of `pagantic serve` (adapters/http/Page.ts), in a real headless
 * Chromium (Debian's `chromium`, driven by puppeteer-core) against a live server
 * on 127.0.0.1 with an API key, a scripted engine, a tool that fails and in-memory
 * durable runs: the page loads without the key, takes it from its field (never in
 * a URL), follows requests live as they run, draws their lifecycle bands,
 * inference and tool bars (the failed tool's error), the demo's vote (its review,
 * five replicas, scripted) with every replica's answer, and a durable run waiting
 * on a human that completes live when answered. Markup planted in a request's
 * content, a tool's error and a human's answer stays text. Screenshots go to test-artifacts/; with UPDATE_SCREENSHOTS=1 the
 * README's two are written to docs/.
 *
 * What the page's "Download trace" saves is read back as a trace file. The events
 * routes themselves (key, bounds, filter, stream) are checked without a browser.
 */
import { describe, expect, it } from "@effect/vitest"
import * as HttpServer from "@effect/platform/HttpServer"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync } from "node:fs"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import type { Slot } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import * as Tool from "../src/services/ToolRegistry.js"
import { Approval, Probe, secretOf } from "./support/durable-runs.js"
import { post, send } from "./support/server.js"
import { add } from "./support/tools.js"
import { DEMO_TEMPERATURE, DEMO_VOTE_REVIEW, SENTIMENT_SYSTEM } from "../src/adapters/cli/commands/DemoData.js"
import { messages } from "../src/adapters/cli/Input.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../src/layers/llama/PaganticChatWrapper.js"
import * as Option from "effect/Option"
import * as Either from "effect/Either"
import { newerThan } from "../src/adapters/http/Page.js"
import { parseTrace } from "../src/adapters/http/PageTrace.js"

// puppeteer-core's types are loaded with the module (a devDependency)
type Browser = import("puppeteer-core").Browser
type Page = import("puppeteer-core").Page

// the browser's globals, in the functions that run in the page (this project compiles without the DOM lib)
declare const document: any
declare const window: any

const KEY = "page-test-key-0123456789"
const auth = { authorization: `Bearer ${KEY}` }

/** Markup that would run script if it were ever parsed as HTML. */
const PLANT = `<img src=x onerror="window.__pwned=1">`

const artifacts = "test-artifacts"
const update = process.env.UPDATE_SCREENSHOTS === "1"

const chromium = (): string | undefined => {
  for (const path of [process.env.CHROMIUM_PATH, "/usr/bin/chromium", "/usr/bin/chromium-browser"]) {
    if (path !== undefined && path !== "" && existsSync(path)) return path
  }
  try {
    return execFileSync("which", ["chromium"], { encoding: "utf8" }).trim() || undefined
  } catch {
    return undefined
  }
}

/** A tool that fails quoting its argument: the planted markup reaches a ToolEnd's error. */
const lookup = Tool.make({
  name: "lookup",
  description: "Looks a word up",
  parameters: Schema.Struct({ query: Schema.String }),
  handler: ({ query }) => Effect.fail(`no entry for ${query}`)
})


const script: ReadonlyArray<ScriptedEngine.Step> = [
  // the chat request: two tool calls (one fails), then the answer
  ScriptedEngine.toolCalls([{ name: "lookup", arguments: { query: PLANT } }, { name: "add", arguments: { a: 2, b: 3 } }], {
    delay: "60 millis",
    usage: { promptTokens: 42, outputTokens: 18 }
  }),
  ScriptedEngine.reply("2 + 3 = 5; the lookup failed.", { delay: "40 millis", usage: { promptTokens: 70, outputTokens: 9 } }),
  // the demo's vote (`pagantic demo`): five replicas classify its review, three agree
  ScriptedEngine.reply(`{"sentiment": "neutral"}`, { delay: "70 millis", usage: { promptTokens: 31, outputTokens: 6 } }),
  ScriptedEngine.reply(`{"sentiment": "negative"}`, { delay: "95 millis", usage: { promptTokens: 31, outputTokens: 6 } }),
  ScriptedEngine.reply(`{ "sentiment" : "neutral" }`, { delay: "60 millis", usage: { promptTokens: 31, outputTokens: 7 } }),
  ScriptedEngine.reply(`{"sentiment": "positive"}`, { delay: "110 millis", usage: { promptTokens: 31, outputTokens: 6 } }),
  ScriptedEngine.reply(`{"sentiment":"neutral"}`, { delay: "80 millis", usage: { promptTokens: 31, outputTokens: 5 } })
]

/** The server: key, scripted engine, the tools, durable runs of the approval definition, and the slots they open. */
const serveAll = Effect.gen(function* () {
  const slots = yield* Ref.make<ReadonlyArray<Slot>>([])
  const probe = Layer.succeed(Probe, {
    work: (_step, value) => Effect.sleep("30 millis").pipe(Effect.as(value)),
    between: () => Effect.void,
    notify: (slot) => Ref.update(slots, (s) => [...s, slot])
  })
  const runsLayer = InMemoryRuns.layer({ definitions: [Approval] }).pipe(Layer.provide(probe))
  const server = Http.layer({ port: 0, apiKey: Redacted.make(KEY) }).pipe(
    Layer.provideMerge(Live.layer({ engine: ScriptedEngine.layer(script, { whenExhausted: "repeat-last" }), tools: [lookup, add] }))
  )
  const context = yield* Layer.build(Layer.provideMerge(server, runsLayer)).pipe(Effect.orDie)
  const address = Context.get(context, HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
  const runs = Context.get(context as unknown as Context.Context<Runs.Runs>, Runs.Runs)
  return { url: `http://127.0.0.1:${address.port}`, runs, slots }
})

/** A headless Chromium, closed with the scope; every page step below has its own timeout. */
const browser: Effect.Effect<Browser, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(async () => {
    const puppeteer = await import("puppeteer-core")
    const executablePath = chromium()
    if (executablePath === undefined) throw new Error("no chromium: install Debian's chromium or set CHROMIUM_PATH")
    return puppeteer.launch({
      executablePath,
      headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
      protocolTimeout: 30_000
    })
  }).pipe(Effect.timeout("30 seconds"), Effect.orDie),
  (b) => Effect.promise(() => b.close()).pipe(Effect.timeout("10 seconds"), Effect.ignore)
)

/** A page with its console errors and every URL it asked for recorded. */
const openPage = (b: Browser) =>
  Effect.promise(async () => {
    const page = await b.newPage()
    page.setDefaultTimeout(15_000)
    await page.setViewport({ width: 1280, height: 760 })
    const urls: Array<string> = []
    const errors: Array<string> = []
    page.on("request", (request) => void urls.push(request.url()))
    page.on("pageerror", (error) => void errors.push(String(error)))
    return { page, urls, errors }
  }).pipe(Effect.timeout("20 seconds"), Effect.orDie)

const step = <A>(what: string, f: () => Promise<A>): Effect.Effect<A> =>
  Effect.tryPromise({ try: f, catch: (e) => new Error(`${what}: ${String(e)}`) }).pipe(
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error(`${what}: timed out`) }),
    Effect.orDie
  )

const shoot = (page: Page, name: string, docs?: string) =>
  step(`screenshot ${name}`, async () => {
    mkdirSync(artifacts, { recursive: true })
    await page.screenshot({ path: `${artifacts}/${name}.png`, fullPage: true })
    if (update && docs !== undefined) {
      mkdirSync("docs", { recursive: true })
      await page.screenshot({ path: `docs/${docs}.png`, fullPage: false })
    }
  })

/** Loads the page, finds it asks for the key, types it and connects. */
const connect = (page: Page, url: string) =>
  Effect.gen(function* () {
    yield* step("load the page", () => page.goto(`${url}/`, { waitUntil: "domcontentloaded" }))
    yield* step("the page asks for the key", () =>
      page.waitForFunction(() => document.getElementById("notice")?.textContent?.includes("API key") === true))
    yield* step("type the key", () => page.type("#key", KEY))
    yield* step("connect", () => page.click("#connect"))
    yield* step("live", () => page.waitForFunction(() => document.getElementById("notice")?.textContent === "live"))
  })

const clickItem = (page: Page, kind: string, id: string) =>
  step(`select ${kind} ${id}`, async () => {
    const selector = `li[data-kind="${kind}"][data-id="${id}"]`
    await page.waitForSelector(selector)
    // the lists are drawn again as events arrive: find and click in one turn of the page
    await page.$eval(selector, (node: any) => node.click())
    await page.waitForFunction((wanted) => document.querySelector("#detail h2")?.textContent === wanted, {}, `${kind} ${id}`)
  })

const text = (page: Page, selector: string) =>
  step(`text of ${selector}`, () => page.$$eval(selector, (nodes) => nodes.map((n) => n.textContent ?? "")))

describe("the runs page in Chromium", () => {
  it.live("requests followed live: lifecycle bands, inference and tool bars, the failed tool's error, the demo's vote with each replica's answer; planted markup stays text; the key never in a URL", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { url } = yield* serveAll
        const { errors, page, urls } = yield* openPage(yield* browser)
        yield* connect(page, url)

        // the requests run after the page is open: it learns of them over SSE
        const chat = yield* post(`${url}/v1/run`, {
          requestId: "page-chat",
          mode: "chat",
          messages: [{ role: "user", content: `Add 2 and 3, and look up ${PLANT}` }],
          tools: ["lookup", "add"]
        }, auth)
        expect(chat.status).toBe(200)
        expect(chat.json.toolCallsMade.map((c: { name: string; isError: boolean }) => [c.name, c.isError])).toEqual([
          ["lookup", true],
          ["add", false]
        ])
        const vote = yield* post(`${url}/v1/run`, {
          requestId: "demo-vote",
          mode: "redundant",
          messages: messages(DEMO_VOTE_REVIEW, Option.some(SENTIMENT_SYSTEM)),
          output: { schema: BUNDLED_SENTIMENT_SCHEMA },
          hints: { temperature: DEMO_TEMPERATURE },
          redundancy: { n: 5, voting: "majority" }
        }, auth)
        expect(vote.status).toBe(200)
        expect(vote.json.structuredOutput).toEqual({ sentiment: "neutral" })

        // the chat request's timeline
        yield* clickItem(page, "request", "page-chat")
        yield* step("the bands and bars", () =>
          page.waitForFunction(() =>
            document.querySelectorAll(".band[data-state]").length >= 3 && document.querySelectorAll(".row.tool").length === 2
          ))
        const states = yield* step("states", () =>
          page.$$eval(".band[data-state]", (nodes) => nodes.map((n) => n.getAttribute("data-state"))))
        expect(states).toEqual(["PREPARE", "EXECUTE", "COMPLETE"])
        const inferences = yield* text(page, ".row.inference .label")
        expect(inferences).toHaveLength(2)
        expect(inferences[0]).toMatch(/^inference · \d+ ms · 42 in \/ 18 out tokens · tool_calls$/)
        expect(inferences[1]).toMatch(/· 70 in \/ 9 out tokens · stop$/)
        const failedTool = yield* text(page, `.row.tool[data-tool="lookup"] .error`)
        expect(failedTool).toEqual([`TOOL_EXECUTION_FAILED: Tool "lookup" failed: no entry for ${PLANT}`])
        expect(yield* step("the failed bar", () => page.$$(`.row.tool[data-tool="lookup"] .bar.tool.failed`))).toHaveLength(1)
        expect(yield* step("the other bar", () => page.$$(`.row.tool[data-tool="add"] .bar.tool.failed`))).toHaveLength(0)
        const bar = yield* step("a bar's geometry", () =>
          page.$eval(`.row.inference .bar`, (node) => {
            const r = node.getBoundingClientRect()
            return { width: r.width, height: r.height }
          }))
        expect(bar.width).toBeGreaterThan(2)
        expect(bar.height).toBeGreaterThan(5)
        yield* shoot(page, "page-chat-tool")

        // the vote's timeline: every replica's answer, the winner marked
        yield* clickItem(page, "request", "demo-vote")
        yield* step("the replicas", () => page.waitForFunction(() => document.querySelectorAll(".vote .replica").length === 5))
        const heading = yield* text(page, ".vote h3")
        expect(heading[0]).toMatch(/^vote \(majority\): replica \d wins, confidence 0\.60, quorum 3$/)
        const answers = yield* text(page, ".vote .replica .answer")
        // each replica's answer as the vote compared it (its JSON, whitespace aside)
        expect(answers.map((a) => JSON.parse(a).sentiment).sort()).toEqual(["negative", "neutral", "neutral", "neutral", "positive"])
        const winner = yield* text(page, ".vote .replica.winner .answer")
        expect(winner).toHaveLength(1)
        expect(JSON.parse(winner[0]!)).toEqual({ sentiment: "neutral" })
        expect(yield* text(page, ".row.inference")).toHaveLength(5)
        // the replicas' own moves are not the request's: one band per state
        const voteStates = yield* step("the vote's states", () =>
          page.$$eval(".band[data-state]", (nodes) => nodes.map((n) => n.getAttribute("data-state"))))
        expect(voteStates).toEqual(["PREPARE", "EXECUTE", "VALIDATE", "COMPLETE"])
        yield* shoot(page, "page-vote", "page-vote")

        // markup in the data stayed text: no element made of it, no script ran
        const planted = yield* step("planted markup", () =>
          page.evaluate(() => ({
            images: document.querySelectorAll("img").length,
            pwned: window.__pwned ?? null
          })))
        expect(planted).toEqual({ images: 0, pwned: null })
        expect(errors).toEqual([])
        expect(urls.filter((u) => u.includes(KEY))).toEqual([])
        expect(urls.every((u) => u.startsWith(url))).toBe(true)
      })
    ), { timeout: 120_000 })

  it.live("a durable run waiting on a human: its records and the slot, then answered, completed live over SSE", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { runs, slots, url } = yield* serveAll
        yield* runs.start(Approval, { slaMillis: 3_600_000 }, { id: "approval-7" })
        const waiting = yield* runs.await("approval-7", { untilSuspended: true })
        expect(waiting.status).toBe("suspended")
        const slot = (yield* Ref.get(slots)).find((s) => s.runId === "approval-7")!

        const { errors, page, urls } = yield* openPage(yield* browser)
        yield* connect(page, url)
        yield* clickItem(page, "run", "approval-7")
        yield* step("the waiting slot", () => page.waitForSelector(".waiting-slot"))
        expect((yield* text(page, ".waiting-slot h3"))[0]).toBe(`waiting on the human slot ${slot.key}`)
        expect((yield* text(page, "#detail .summary .status"))[0]).toBe("suspended")
        expect(yield* text(page, ".band.waiting")).toEqual([`waiting on ${slot.key}`])
        // the records come in a fetch of their own, after the run's summary and its slot: wait for them
        yield* step("the records", () =>
          page.waitForFunction(() => Array.from(document.querySelectorAll(".row.record")).some((n: any) => n.getAttribute("data-kind") === "DO")))
        const kinds = yield* step("record kinds", () =>
          page.$$eval(".row.record", (nodes) => nodes.map((n) => n.getAttribute("data-kind"))))
        expect(kinds[0]).toBe("INTEND")
        expect(kinds).toContain("DO")
        yield* shoot(page, "page-run-waiting", "page-run-waiting")

        // the human answers: the page, following the run's events, sees it complete
        const answered = yield* post(`${url}/v1/runs/approval-7/slots/${encodeURIComponent(slot.key)}`, {
          secret: secretOf(slot),
          response: { kind: "submit", answer: { approved: true, note: PLANT } }
        }, auth)
        expect(answered.status).toBe(200)
        yield* step("completed", () =>
          page.waitForFunction(() => document.querySelector("#detail .summary .status")?.textContent === "completed"))
        yield* step("the KNOW record", () =>
          page.waitForFunction(() => Array.from(document.querySelectorAll(".row.record")).some((n: any) => n.getAttribute("data-kind") === "KNOW")))
        expect(yield* step("no slot waiting", () => page.$$(".waiting-slot, .band.waiting"))).toHaveLength(0)
        const bodies = yield* text(page, ".records td.body")
        // the answer's record, as JSON text
        expect(bodies.some((b) => b.includes(JSON.stringify({ approved: true, note: PLANT })))).toBe(true)
        expect(yield* step("images", () => page.$$("img"))).toHaveLength(0)
        yield* shoot(page, "page-run-completed")

        // what "Download trace" saves is a trace file `pagantic trace show` reads back
        const saved: string = yield* step("the trace", () => page.evaluate(() => window.paganticPage.traceLines()))
        const trace = Either.getOrThrowWith(parseTrace(saved), (p) => new Error(`${p.where}: ${p.message}`))
        expect(trace.runs).toHaveLength(1)
        expect(trace.runs[0]!.run).toMatchObject({ id: "approval-7", status: "completed" })
        expect(trace.runs[0]!.records.map((r: any) => r.kind)).toContain("KNOW")
        expect(errors).toEqual([])
        expect(urls.filter((u) => u.includes(KEY))).toEqual([])
      })
    ), { timeout: 120_000 })

  it.live("acting from the page: an answer that is not JSON is refused where it was typed, a submitted answer completes the run, another run is cancelled", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { runs, url } = yield* serveAll
        for (const id of ["approval-8", "approval-9"]) {
          yield* runs.start(Approval, { slaMillis: 3_600_000 }, { id })
          expect((yield* runs.await(id, { untilSuspended: true })).status).toBe("suspended")
        }
        const { errors, page } = yield* openPage(yield* browser)
        yield* connect(page, url)
        // the run's records come in a fetch of their own and redraw the run: act once they are in
        const settled = (id: string) =>
          Effect.zipRight(
            clickItem(page, "run", id),
            step(`the records of ${id}`, () =>
              page.waitForFunction(() => Array.from(document.querySelectorAll(".row.record")).some((n: any) => n.getAttribute("data-kind") === "DO")))
          )
        yield* settled("approval-8")
        yield* step("the answer form", () => page.waitForSelector(".slot-form .slot-answer"))
        yield* step("type no JSON", () => page.type(".slot-answer", "{approved"))
        yield* step("submit it", () => page.click(".slot-submit"))
        yield* step("refused", () => page.waitForSelector(".action-error"))
        expect((yield* text(page, ".action-error"))[0]).toBe("the answer is not JSON")
        // what was typed is still there after the page redrew
        expect(yield* step("the draft", () => page.$eval(".slot-answer", (n: any) => n.value))).toBe("{approved")
        yield* step("clear", () => page.$eval(".slot-answer", (n: any) => { n.value = "" }))
        // a long note: its record's body opens in place
        const note = `from the page ${"n".repeat(600)} end`
        yield* step("type the answer", () => page.type(".slot-answer", `{"approved":true,"note":"${note}"}`, { delay: 0 }))
        yield* step("submit it", () => page.click(".slot-submit"))
        yield* step("completed", () =>
          page.waitForFunction(() => document.querySelector("#detail .summary .status")?.textContent === "completed"))
        expect((yield* runs.poll("approval-8")).result).toMatchObject({ outcome: "approved", note })
        yield* step("the KNOW record", () =>
          page.waitForFunction(() => Array.from(document.querySelectorAll(".row.record")).some((n: any) => n.getAttribute("data-kind") === "KNOW")))
        // records are numbered within the run, from 1
        const labels = yield* text(page, ".row.record .label")
        expect(labels.map((l) => Number(/^#(\d+) /.exec(l)?.[1]))).toEqual(labels.map((_, i) => i + 1))
        const long = yield* text(page, ".records .long-body pre")
        expect(long.some((b) => b.includes(`${"n".repeat(600)} end`))).toBe(true)
        expect(yield* step("no form left", () => page.$$(".slot-form, .cancel-run"))).toHaveLength(0)

        yield* settled("approval-9")
        yield* step("the cancel button", () => page.waitForSelector(".cancel-run"))
        yield* step("cancel", () => page.click(".cancel-run"))
        yield* step("cancelled", () =>
          page.waitForFunction(() => document.querySelector("#detail .summary .status")?.textContent === "cancelled"))
        expect((yield* runs.poll("approval-9")).status).toBe("cancelled")
        expect(errors).toEqual([])
      })
    ), { timeout: 120_000 })

  it.live("the link pagantic serve logs (/#key=...): the page connects with it, takes it out of the address, keeps it for the tab, and no request carries it", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { url } = yield* serveAll
        const { errors, page, urls } = yield* openPage(yield* browser)
        yield* step("load the link", () => page.goto(`${url}/#key=${encodeURIComponent(KEY)}`, { waitUntil: "domcontentloaded" }))
        yield* step("live", () => page.waitForFunction(() => document.getElementById("notice")?.textContent === "live"))
        expect(yield* step("the address", () => page.evaluate(() => window.location.href))).toBe(`${url}/`)
        // a reload of the tab stays connected: the key was kept, not only read
        yield* step("reload", () => page.reload({ waitUntil: "domcontentloaded" }))
        yield* step("live again", () => page.waitForFunction(() => document.getElementById("notice")?.textContent === "live"))
        expect(errors).toEqual([])
        // what goes on the wire: a URL without its fragment (puppeteer lists the page's own with it)
        const sent = (u: string) => u.split("#")[0]!
        expect(urls.filter((u) => sent(u).includes(KEY))).toEqual([])
        expect(urls.filter((u) => u.includes(KEY))).toEqual([`${url}/#key=${KEY}`])
        // a wrong key in the link (in a new tab) is the server's to judge: 401, said on the page
        const other = yield* openPage(yield* browser)
        yield* step("a wrong link", () => other.page.goto(`${url}/#key=not-the-key`, { waitUntil: "domcontentloaded" }))
        yield* step("refused", () =>
          other.page.waitForFunction(() => document.getElementById("notice")?.textContent?.includes("API key") === true))
        expect(other.urls.filter((u) => sent(u).includes("not-the-key"))).toEqual([])
      })
    ), { timeout: 60_000 })
})

describe("the page's routes", () => {
  it("the stream sends each event once: those after the last it sent, or all when that one left the ring", () => {
    const [a, b, c, d] = [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]
    expect(newerThan([a, b, c], undefined)).toEqual([a, b, c])
    expect(newerThan([a, b, c], b)).toEqual([c])
    expect(newerThan([a, b, c], c)).toEqual([])
    // the ring dropped b (and a) since: every event left is newer
    expect(newerThan([c, d], b)).toEqual([c, d])
    // equal but not the same event: identity, not content
    expect(newerThan([a, { n: 2 }, c], b)).toEqual([a, { n: 2 }, c])
  })

  it.live("the page is open and strict; the events need the key, are bounded and filtered, and stream new events", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { url } = yield* serveAll
        const page = yield* send(`${url}/`)
        expect(page.status).toBe(200)
        expect(page.headers.get("content-type")).toMatch(/^text\/html/)
        expect(page.headers.get("content-security-policy")).toMatch(/script-src 'self';/)
        expect(page.text).not.toMatch(/<script>/)
        expect((yield* send(`${url}/ui/page.js`)).status).toBe(200)
        expect((yield* send(`${url}/`, { method: "POST", body: "{}", headers: auth })).status).toBe(405)

        const locked = yield* send(`${url}/v1/events`)
        expect(locked.status).toBe(401)
        expect((yield* send(`${url}/v1/events/stream`)).status).toBe(401)
        expect((yield* send(`${url}/v1/events?key=${KEY}`)).status).toBe(401)

        for (const [query, field] of [["limit=0", "limit"], ["limit=10001", "limit"], ["limit=ten", "limit"], ["requestId=a&requestId=b", "requestId"], ["token=x", "token"]]) {
          const bad = yield* send(`${url}/v1/events?${query}`, { headers: auth })
          expect(bad.status, query).toBe(400)
          expect(bad.json.error.code).toBe("CONFIG_INVALID_REQUEST")
          expect(bad.json.error.details.field).toBe(field)
        }

        // a stream opened before the request sees its events as they are recorded
        const streamed = Effect.promise(async () => {
          const res = await fetch(`${url}/v1/events/stream?requestId=routes-1`, { headers: auth, signal: AbortSignal.timeout(15_000) })
          const reader = res.body!.getReader()
          let text = ""
          while (!text.includes('"toState":"COMPLETE"')) {
            const chunk = await reader.read()
            if (chunk.done) break
            text += new TextDecoder().decode(chunk.value)
          }
          await reader.cancel()
          return { status: res.status, type: res.headers.get("content-type"), text }
        })
        const fiber = yield* Effect.fork(streamed)
        yield* Effect.sleep("300 millis")
        const run = yield* post(`${url}/v1/run`, { requestId: "routes-1", mode: "chat", messages: [{ role: "user", content: "hi" }] }, auth)
        expect(run.status).toBe(200)
        yield* post(`${url}/v1/run`, { requestId: "routes-2", mode: "chat", messages: [{ role: "user", content: "hi" }] }, auth)
        const sse = yield* Fiber.join(fiber).pipe(Effect.timeout("20 seconds"), Effect.orDie)
        expect(sse.status).toBe(200)
        expect(sse.type).toMatch(/^text\/event-stream/)
        const data = sse.text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5)))
        expect(data.length).toBeGreaterThan(2)
        expect(data.every((e) => e.correlation.requestId === "routes-1")).toBe(true)
        expect(data.map((e) => e._tag)).toContain("InferenceEnd")

        const one = yield* send(`${url}/v1/events?requestId=routes-2`, { headers: auth })
        expect(one.status).toBe(200)
        expect(one.json.events.length).toBeGreaterThan(2)
        expect(one.json.events.every((e: { correlation: { requestId: string } }) => e.correlation.requestId === "routes-2")).toBe(true)
        const last = yield* send(`${url}/v1/events?limit=1`, { headers: auth })
        expect(last.json.events).toHaveLength(1)
        expect(last.json.events[0].correlation.requestId).toBe("routes-2")
      })
    ), { timeout: 60_000 })
})
