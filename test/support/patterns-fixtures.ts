/**
 * Fixtures for the pattern tests: a responder registry of scripted LLMs (one
 * ScriptedEngine per model, their requests recorded), pattern and system
 * responders, humans (actors) whose slots are handed to a Ref, and the query
 * definition on the in-memory Runs layer.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as InMemoryResponders from "../../src/layers/InMemoryResponders.js"
import * as InMemoryRuns from "../../src/layers/InMemoryRuns.js"
import * as LexicalReranker from "../../src/layers/LexicalReranker.js"
import * as ScriptedEngine from "../../src/layers/ScriptedEngine.js"
import * as Orchestration from "../../src/programs/Orchestration.js"
import type { Responder } from "../../src/services/ResponderRegistry.js"
import * as Runs from "../../src/services/Runs.js"

export const models = ["haiku", "sonnet", "opus", "gpt", "gemini", "auditor"] as const
export type Model = (typeof models)[number]

export const aliases: Record<string, string> = Object.fromEntries(models.map((m) => [m, `${m}-model`]))

export type Scripts = Partial<Record<Model, ReadonlyArray<ScriptedEngine.Step>>>

/** A classification reply (JSON), optionally with `_confidence`. */
export const classify = (category: string, confidence?: number, rationale?: string) =>
  ScriptedEngine.reply(
    JSON.stringify({
      category,
      ...(confidence === undefined ? {} : { _confidence: confidence }),
      ...(rationale === undefined ? {} : { _rationale: rationale })
    })
  )

export const verdict = (approved: boolean, rationale: string) =>
  ScriptedEngine.reply(JSON.stringify({ approved, rationale }))

export const setup = (
  scripts: Scripts,
  extra: ReadonlyArray<Responder> = [],
  options: Omit<Orchestration.Options, "notify"> = {}
) =>
  Effect.gen(function* () {
    const engines = yield* Effect.forEach(models, (m) =>
      Effect.map(ScriptedEngine.make(scripts[m] ?? []), (made) => [m, made] as const))
    const byModel = Object.fromEntries(engines) as Record<Model, Effect.Effect.Success<ReturnType<typeof ScriptedEngine.make>>>
    const notices = yield* Ref.make<ReadonlyArray<Orchestration.Notice>>([])
    const responders: ReadonlyArray<Responder> = [
      ...models.map((m): Responder => ({ id: m, kind: "llm", model: `${m}-model`, engine: byModel[m].engine })),
      {
        id: "keywords",
        kind: "pattern",
        capabilities: { classification: (r) => ({ category: r.input.includes("grant") ? "research" : "news", confidence: 0.4 }) }
      },
      ...extra
    ]
    const queries = Orchestration.definition({
      ...options,
      aliases,
      notify: (notice) => Ref.update(notices, (all) => [...all, notice])
    })
    const layer = InMemoryRuns.layer({ definitions: [queries] }).pipe(
      Layer.provide(Layer.mergeAll(InMemoryResponders.layer({ responders, aliases }), LexicalReranker.layer()))
    )
    /** How many requests each model's engine received. */
    const calls = Effect.map(
      Effect.forEach(models, (m) => Effect.map(byModel[m].control.requests, (rs) => [m, rs.length] as const)),
      (pairs) => Object.fromEntries(pairs.filter(([, n]) => n > 0))
    )
    const requests = (m: Model) => byModel[m].control.requests
    return { queries, layer, notices, calls, requests }
  })

/** A classification query with `orchestration` (and any other fields). */
export const query = (fields: Record<string, unknown>) => ({
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
  ...fields
})

/** Starts `wire`, waits for the run to end, and reads its thread. */
export const runToEnd = (queries: Orchestration.QueryDefinition, wire: unknown) =>
  Effect.gen(function* () {
    const runs = yield* Runs.Runs
    const id = yield* Orchestration.start(runs, queries, wire, { aliases })
    const info = yield* runs.await(id)
    const thread = yield* Orchestration.thread(runs, id)
    return { id, info, thread }
  })
