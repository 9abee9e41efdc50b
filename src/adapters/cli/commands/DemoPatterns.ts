/**
 * The demo's two queries of the bundled model (`infer.query.v1`), each
 * responder the model at another sampling: a waterfall in memory (two
 * responders that must agree, else a vote of three sampled ones) and an
 * escalation whose last tier is a human, a durable run on the state file that
 * the demo answers with `pagantic respond` run as a child process.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as childProcess from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Redacted from "effect/Redacted"
import * as Text from "../../../domain/Text.js"
import * as Records from "../../../domain/Records.js"
import * as InMemoryResponders from "../../../layers/InMemoryResponders.js"
import * as LexicalReranker from "../../../layers/LexicalReranker.js"
import * as Orchestration from "../../../programs/Orchestration.js"
import * as QueryCheck from "../../../programs/query/Check.js"
import { Engine } from "../../../services/Engine.js"
import type { Responder } from "../../../services/ResponderRegistry.js"
import { Runs } from "../../../services/Runs.js"
import * as Live from "../../Live.js"
import { json, print, seconds } from "../Output.js"
import { commandRunner, definitionsOf, loadDurable, openRuns, runsFailure, storeOf, where } from "../RunsState.js"
import type { EngineSettings } from "../Wiring.js"
import {
  DEMO_ESCALATE_REVIEW,
  DEMO_HUMAN_ANSWER,
  DEMO_LABELS,
  DEMO_WATERFALL_REVIEW
} from "./DemoData.js"
import { demoPart, heading } from "./DemoPart.js"
import * as DemoQuery from "./DemoQuery.js"

const llm = (alias: string) => ({ kind: "llm", model: `~${alias}` })

/** A classification query of `review` by `orchestration`, folded by `fold`. */
const demoQuery = (review: string, fold: string, orchestration: Record<string, unknown>) => ({
  kind: "infer.query.v1",
  input: { inline: review },
  fold: { function: fold },
  answer_shape: { kind: "core.classification.v1", labels: DEMO_LABELS },
  top_k: 3,
  orchestration
})

/** The waterfall: stage 1 two responders that must agree, else stage 2 a vote of three sampled ones; a stage is accepted when more than half of it agrees. */
export const waterfallQuery = demoQuery(DEMO_WATERFALL_REVIEW, "consensus", {
  pattern: "waterfall",
  stages: [{ responders: [llm("greedy"), llm("warm")] }, { responders: [llm("hot")] }],
  accept_expression: "fold.answer.confidence > 0.5"
})

/**
 * The escalation: the greedy model first; its answers carry no confidence of
 * their own, so best_of credits them an llm's default (0.6), below the
 * expression's 0.8: the question goes on to the human.
 */
export const escalateQuery = demoQuery(DEMO_ESCALATE_REVIEW, "best_of", {
  pattern: "escalate",
  tiers: [{ responders: [llm("greedy")] }, { responders: [{ kind: "actor", did: DemoQuery.DEMO_HUMAN }] }],
  escalation_expression: "fold.answer.confidence < 0.8"
})

/** The label a responder's reply carries, or the reply itself cut short. */
const labelOf = (content: string): string => {
  const parsed = Either.try(() => JSON.parse(content) as { readonly category?: unknown })
  return Either.isRight(parsed) && typeof parsed.right.category === "string" ? parsed.right.category : Text.excerpt(content, 40)
}

/** The demo's responders, each llm one telling `heard` what it answered. */
const heardBy = (engine: Engine["Type"], heard: Ref.Ref<ReadonlyArray<readonly [string, string]>>): ReadonlyArray<Responder> =>
  DemoQuery.responders(engine).map((r) =>
    r.kind !== "llm" ? r : {
      ...r,
      engine: { ...r.engine, infer: (request) => Effect.tap(r.engine.infer(request), (res) => Ref.update(heard, (h) => [...h, [r.id, res.content] as const])) }
    }
  )

/** How a KNOW stands: its answer, confidence, fold, pattern, stage and CALLs. */
const printKnow = (know: Records.Know) => {
  const body = know.body
  const o = body._orchestration
  return print(
    `  answer: ${json(body._fold.answer)}, confidence ${body._confidence.toFixed(2)} (${body._fold.function}, ${body._fold.valid} of ${body._fold.total} valid); ` +
      `${o.pattern} ${o.status}${o.stage === undefined ? "" : `, from ${o.pattern === "escalate" ? "tier" : "stage"} ${o.stage + 1}`}, ${o.calls} CALLs` +
      (body._rationale === undefined ? "" : `\n  rationale: ${body._rationale}`)
  )
}

/**
 * A waterfall of the model's responders, in memory: stage 1 greedy and warm,
 * accepted when they agree; else stage 2, three samples at temperature 2, by
 * majority. Prints each stage's answers and the committed answer.
 */
export const waterfallPart = (engine: Layer.Layer<Engine>) =>
  Effect.gen(function* () {
    const service = yield* Effect.provide(Engine, engine)
    const heard = yield* Ref.make<ReadonlyArray<readonly [string, string]>>([])
    const registry = Layer.merge(
      Layer.orDie(InMemoryResponders.layer({ responders: heardBy(service, heard), aliases: DemoQuery.aliases })),
      LexicalReranker.layer()
    )
    return yield* demoPart(
      "query, waterfall: two responders that must agree, else a vote of three sampled ones (patterns on the model)",
      `  review: ${DEMO_WATERFALL_REVIEW}\n  accept_expression: ${waterfallQuery.orchestration.accept_expression}`,
      { mode: "query", messages: [], query: waterfallQuery },
      (response) =>
        Effect.gen(function* () {
          const answers = yield* Ref.get(heard)
          const stage = (ids: ReadonlyArray<string>) => answers.filter(([id]) => ids.includes(id)).map(([id, c]) => `${id} ${labelOf(c)}`).join(", ")
          const first = stage(["greedy", "warm"])
          const second = stage(["hot-1", "hot-2", "hot-3"])
          yield* print(`  stage 1 (greedy, warm): ${first}${second === "" ? "" : " -> not accepted"}`)
          if (second !== "") yield* print(`  stage 2 (hot x3, temperature 2): ${second}`)
          yield* print(`  stages tried: ${second === "" ? 1 : 2} of 2`)
          if (response.query?.know !== undefined) yield* printKnow(response.query.know)
        })
    ).pipe(Effect.provide(Layer.orDie(Live.layer({ engine, tools: [], responders: registry }))))
  })

/** The `pagantic` command of this checkout or package (bin/pagantic.js). */
const launcher = fileURLToPath(new URL("../../../../bin/pagantic.js", import.meta.url))

/** Runs `pagantic args` as a child process: its exit code and output, within `timeoutMs`. */
const runChild = (args: ReadonlyArray<string>, timeoutMs: number) =>
  Effect.async<{ readonly code: number | null; readonly out: string }>((resume) => {
    const child = childProcess.spawn(process.execPath, [launcher, ...args], {
      env: { ...process.env, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      timeout: timeoutMs
    })
    let out = ""
    child.stdout.on("data", (chunk: Buffer) => void (out += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => void (out += chunk.toString()))
    child.on("error", (error) => resume(Effect.succeed({ code: null, out: `${out}${error.message}` })))
    child.on("close", (code) => resume(Effect.succeed({ code, out })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/** A shell word: quoted unless it is plain. */
const shellWord = (word: string) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`)

/**
 * An escalation whose last tier is a human, a durable run on the state file: the
 * model answers first; the expression sends the question on to the human, whose
 * slot the run opens (it suspends). The demo prints the run, the slot and the
 * `pagantic respond` command, releases the state file and runs that command as
 * a child process (the child carries the run on to its KNOW), then reads the
 * KNOW back. A state file held by another process is said and the part skipped.
 */
export const escalatePart = (engine: Layer.Layer<Engine>, settings: EngineSettings) =>
  Effect.gen(function* () {
    yield* heading("query, escalate: the model, then a human (a durable run; the human answers with pagantic respond)")
    yield* print(`  review: ${DEMO_ESCALATE_REVIEW}\n  escalation_expression: ${escalateQuery.orchestration.escalation_expression}`)
    const started = yield* Clock.currentTimeMillis
    const store = yield* storeOf(Option.none())
    const durable = yield* loadDurable
    const notice = yield* Ref.make(Option.none<Orchestration.Notice>())
    const queries = DemoQuery.definition((n) => Ref.set(notice, Option.some(n)))
    const others = (yield* definitionsOf(durable)).filter((d) => d.name !== DemoQuery.name)
    const runner = yield* commandRunner(durable, store)
    const checked = QueryCheck.check(escalateQuery, { aliases: DemoQuery.aliases })
    // the demo's own query: a failure to check it is a bug
    if (Either.isLeft(checked)) return yield* Effect.dieMessage(checked.left.message)
    // the run starts here and waits for its human; the state file is released before the human answers
    const opened = yield* Effect.scoped(
      Effect.gen(function* () {
        const context = yield* Layer.build(durable.layer(store, [...others, queries], engine, runner))
        const runs = Context.get(context, Runs)
        const id = yield* runs.start(queries, checked.right.query)
        const info = yield* runs.await(id, { untilSuspended: true })
        return { id, info }
      })
    ).pipe(Effect.either)
    if (Either.isLeft(opened)) {
      const error = opened.left
      const held = error.code === "ORCHESTRATION_STATE_UNAVAILABLE"
      yield* print(`  ${held ? "skipped" : "failed"}: ${error.code}: ${error.message}`)
      return held
    }
    const { id, info } = opened.right
    if (info.status !== "suspended" || info.waitingOn === undefined) {
      yield* print(`  run ${id}: ${info.status}, not waiting for the human${info.error === undefined ? "" : `: ${info.error.code}: ${info.error.message}`}`)
      return false
    }
    const notified = yield* Ref.get(notice)
    if (Option.isNone(notified)) {
      yield* print(`  failed: run ${id} waits on slot ${info.waitingOn}, but its human was not notified`)
      return false
    }
    const told = notified.value
    const slot = info.waitingOn
    yield* print(`  the model's tier was not enough: run ${id} waits for the human ${DemoQuery.DEMO_HUMAN} on slot ${slot}`)
    const args = [
      "respond", id, slot,
      "--secret", Redacted.value(told.slot.secret),
      "--submit", JSON.stringify(DEMO_HUMAN_ANSWER),
      ...(store._tag === "Sqlite" ? ["--state", store.file] : [])
    ]
    yield* print(`  the human answers:\n  $ pagantic ${args.map(shellWord).join(" ")}`)
    const child = yield* runChild(args, 120_000)
    for (const line of child.out.trimEnd().split("\n")) yield* print(`  | ${Text.excerpt(line, 160)}`)
    if (child.code !== 0) {
      yield* print(`  failed: pagantic respond exited with ${child.code ?? "a signal"}`)
      return false
    }
    const ended = yield* Effect.scoped(
      Effect.gen(function* () {
        const { runs } = yield* openRuns(Option.none(), settings, engine)
        const info = yield* Effect.mapError(runs.poll(id), runsFailure)
        const records = yield* Effect.mapError(Orchestration.thread(runs, id), runsFailure)
        return { result: info.result, status: info.status, error: info.error, records }
      })
    )
    const know = Schema.decodeUnknownOption(Records.Know)(ended.result)
    yield* print(`  run ${id} on ${where(store)}: ${ended.status}; ${seconds((yield* Clock.currentTimeMillis) - started)}, the human's child process included`)
    for (const record of ended.records) {
      const key = record.id.startsWith(`${id}/`) ? record.id.slice(id.length + 1) : record.id
      // the correlation id repeats the record's key: left out
      const { correlation_id: _, ...body } = record.body as Record<string, unknown>
      yield* print(`  ${record.kind} ${key}${record.kind === "KNOW" ? "" : `: ${Text.excerpt(json(body), 120)}`}`)
    }
    if (Option.isNone(know)) {
      yield* print(`  failed: the run ended ${ended.status} without a KNOW${ended.error === undefined ? "" : `: ${ended.error.code}: ${ended.error.message}`}`)
      return false
    }
    yield* printKnow(know.value)
    return true
  }).pipe(Effect.catchAll((error) => Effect.as(print(`  failed: ${error.message}`), false)))

