/**
 * The HTTP contract: endpoints, bodies and error shapes, apart from the handlers.
 *
 *   POST /v1/run               a SystemRequest in, the SystemResponse out (or, with
 *                              `Prefer: respond-async` and durable runs, 202 and its run)
 *   POST /v1/chat/completions  OpenAI-compatible chat completions (JSON or SSE)
 *   GET  /v1/models, /v1/models/{id}   OpenAI-compatible: the model the engine serves
 *   POST /v1/queries           an infer.query.v1 query in, its answer (200) or its run (202) out
 *   GET  /health               the engine's model and "ok"
 *   GET  /v1/runs, /v1/runs/{id}, /v1/runs/{id}/events (SSE)
 *   POST /v1/runs                               start a run of an offered definition
 *   POST /v1/runs/{id}/cancel, /v1/runs/{id}/slots/{slot}   durable runs
 *   GET  /v1/responders/{id}/inbox (SSE)   a human responder's slots as they are sent
 *
 * A refused request is one typed error per endpoint, carrying the status it is
 * sent with: `RunFailure` (the full SystemResponse: request id, partial output,
 * the SystemError under `error`) and `ChatFailure` (OpenAI's
 * `{ error: { message, type, code, param } }` with the taxonomy code as `code`).
 * HttpApi picks an error's status from its schema, so each endpoint adds one
 * member schema per status (`RunFailure.at(status)`); a member encodes only the
 * body, never the error's tag, so the wire is exactly the response shape.
 *
 * The payloads are declared for the contract (OpenAPI, clients) but the
 * handlers read bodies themselves (`handleRaw`): the edge bounds and walks raw
 * JSON (`Guard.ts`) before any schema sees it. See `Http.ts` for why the
 * platform's payload decoding is not used.
 */
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as Schema from "effect/Schema"
import { ModelInfo } from "../../domain/ModelInfo.js"
import { Query } from "../../domain/Query.js"
import { SystemError, SystemRequest, SystemResponse } from "../../domain/System.js"
import { ChatCompletion, ChatCompletionRequest, OpenAiErrorBody } from "./ChatCompletionsWire.js"

// ---------------------------------------------------------------------------
// Statuses
// ---------------------------------------------------------------------------

/** The statuses a failure code maps to (`Status.ts`). */
export const errorStatuses = [400, 403, 413, 422, 429, 499, 500, 502, 503, 504] as const
export type ErrorStatus = (typeof errorStatuses)[number]

/**
 * Every status a handler refuses a request with: a failure code's, and the
 * transport's own 409 (a request id in use) and 415 (a body that is not JSON).
 */
export const refusalStatuses = [...errorStatuses, 404, 409, 415] as const
export type RefusalStatus = (typeof refusalStatuses)[number]

const RefusalStatus = Schema.Literal(...refusalStatuses)

/**
 * One member schema per status: the wire body on the encoded side, the failure
 * with that status on the type side, annotated with the status for HttpApi.
 */
const byStatus = <F extends { readonly status: RefusalStatus }, W, WI>(
  body: Schema.Schema<W, WI>,
  isFailure: (u: unknown) => u is F,
  make: (status: RefusalStatus, body: W) => F,
  bodyOf: (failure: F) => W
) =>
(status: RefusalStatus): Schema.Schema<F, WI> =>
  Schema.transform(
    body,
    Schema.declare((u): u is F => isFailure(u) && u.status === status),
    { strict: true, decode: (w) => make(status, w), encode: bodyOf }
  ).annotations(HttpApiSchema.annotations({ status }))

// ---------------------------------------------------------------------------
// /v1/run failures
// ---------------------------------------------------------------------------

/** A refused `/v1/run`: the SystemResponse with its error, sent with `status`. */
export class RunFailure extends Schema.TaggedError<RunFailure>()("RunFailure", {
  status: RefusalStatus,
  response: SystemResponse
}) {
  /** The wire schema of a RunFailure sent with `status` (its body is the SystemResponse). */
  static readonly at = byStatus(
    SystemResponse,
    (u): u is RunFailure => u instanceof RunFailure,
    (status, response) => new RunFailure({ status, response }),
    (failure) => failure.response
  )
}

// ---------------------------------------------------------------------------
// OpenAI-compatible chat completions (their wire: ChatCompletionsWire.ts)
// ---------------------------------------------------------------------------

export * from "./ChatCompletionsWire.js"

/** A refused `/v1/chat/completions`: OpenAI's error body, sent with `status`. */
export class ChatFailure extends Schema.TaggedError<ChatFailure>()("ChatFailure", {
  status: RefusalStatus,
  body: OpenAiErrorBody
}) {
  /** The wire schema of a ChatFailure sent with `status` (its body is OpenAI's `{ error }`). */
  static readonly at = byStatus(
    OpenAiErrorBody,
    (u): u is ChatFailure => u instanceof ChatFailure,
    (status, body) => new ChatFailure({ status, body }),
    (failure) => failure.body
  )
}

// ---------------------------------------------------------------------------
// Health
// ---------------------------------------------------------------------------

export const Health = Schema.Struct({
  status: Schema.Literal("ok"),
  model: ModelInfo
})

// ---------------------------------------------------------------------------
// The API
// ---------------------------------------------------------------------------

/**
 * A request started as a durable run (202, asked with `Prefer: respond-async`):
 * follow it at `links.self` (its result is the SystemResponse), `links.events`
 * (SSE), cancel it at `links.cancel`; it ends by `deadline` at the latest.
 */
export const RunAccepted = Schema.Struct({
  runId: Schema.String,
  requestId: Schema.String,
  status: Schema.Literal("running", "suspended", "stale", "completed", "failed", "cancelled"),
  links: Schema.Struct({ self: Schema.String, events: Schema.String, cancel: Schema.String }),
  /** The run's time limit in ms (absent: unbounded); past it the run ends CANCELLED_TIMEOUT. */
  timeoutMs: Schema.optional(Schema.Number),
  /** When the limit passes (ISO 8601), counted from the run's start. */
  deadline: Schema.optional(Schema.String)
}).annotations({ identifier: "RunAccepted" })
export type RunAccepted = typeof RunAccepted.Type

export const run = HttpApiEndpoint.post("run", "/v1/run")
  .setPayload(SystemRequest)
  .addSuccess(SystemResponse)
  .addSuccess(RunAccepted, { status: 202 })
  .addError(Schema.Union(...refusalStatuses.map(RunFailure.at)))

export const chatCompletions = HttpApiEndpoint.post("chatCompletions", "/v1/chat/completions")
  .setPayload(ChatCompletionRequest)
  .addSuccess(ChatCompletion)
  .addError(Schema.Union(...refusalStatuses.map(ChatFailure.at)))

/**
 * OpenAI's Responses API (`ResponsesWire.ts` says how each field is honoured): the
 * body is translated to a chat completion and checked as one; a `response` object
 * or its event stream comes back, refusals in OpenAI's error shape.
 */
export const responses = HttpApiEndpoint.post("responses", "/v1/responses")
  .setPayload(Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({ identifier: "CreateResponse" }))
  .addSuccess(Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({ identifier: "Response" }))
  .addError(Schema.Union(...refusalStatuses.map(ChatFailure.at)))

export const health = HttpApiEndpoint.get("health", "/health").addSuccess(Health)

/**
 * The body of `/v1/queries`: an `infer.query.v1` query and two transport fields,
 * `async` (answer 202 with the run id once the run is started) and `requestId`.
 */
export const QueryRequest = Schema.Struct({
  ...Query.fields,
  async: Schema.optional(Schema.Boolean),
  requestId: Schema.optional(Schema.String)
})

/** A query's run started but not finished (202): `query.runId` names it, `query.status` says where it stands. */
export const QueryAccepted = SystemResponse.annotations({ identifier: "QueryAccepted" })

export const queries = HttpApiEndpoint.post("queries", "/v1/queries")
  .setPayload(QueryRequest)
  .addSuccess(SystemResponse)
  .addSuccess(QueryAccepted, { status: 202 })
  .addError(Schema.Union(...refusalStatuses.map(RunFailure.at)))

export class PaganticGroup extends HttpApiGroup.make("pagantic").add(run).add(chatCompletions).add(responses).add(queries).add(health) {}

// ---------------------------------------------------------------------------
// OpenAI-compatible models
// ---------------------------------------------------------------------------

/**
 * A model as OpenAI lists it, plus its context window (`context_length`, the
 * name llama.cpp's server and OpenRouter use) and what the engine can do.
 */
export const OpenAiModel = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("model"),
  /** Unix seconds: when this server started serving the model. */
  created: Schema.Number,
  owned_by: Schema.String,
  context_length: Schema.Number,
  pagantic: Schema.Struct({ supportsGrammar: Schema.Boolean, supportsTools: Schema.Boolean })
}).annotations({ identifier: "OpenAiModel" })
export type OpenAiModel = typeof OpenAiModel.Type

export const OpenAiModelList = Schema.Struct({ object: Schema.Literal("list"), data: Schema.Array(OpenAiModel) })
export type OpenAiModelList = typeof OpenAiModelList.Type

const modelRefusals = Schema.Union(...refusalStatuses.map(ChatFailure.at))

export const listModels = HttpApiEndpoint.get("listModels", "/v1/models").addSuccess(OpenAiModelList).addError(modelRefusals)

/** One model by id; an id the server does not serve is a 404 in OpenAI's error shape. */
export const showModel = HttpApiEndpoint.get("showModel", "/v1/models/:id")
  .setPath(Schema.Struct({ id: Schema.String }))
  .addSuccess(OpenAiModel)
  .addError(modelRefusals)

/** OpenAI's models routes, for clients that discover the model before they ask it. */
export class ModelsGroup extends HttpApiGroup.make("models").add(listModels).add(showModel) {}

// ---------------------------------------------------------------------------
// Durable runs
// ---------------------------------------------------------------------------

/** A run as the runs endpoints send it: its error, when it has one, as the SystemError clients see. */
export const RunView = Schema.Struct({
  id: Schema.String,
  definition: Schema.String,
  status: Schema.Literal("running", "suspended", "stale", "completed", "failed", "cancelled"),
  waitingOn: Schema.optional(Schema.String),
  result: Schema.optional(Schema.Unknown),
  error: Schema.optional(SystemError),
  createdAt: Schema.String,
  updatedAt: Schema.String
}).annotations({ identifier: "RunView" })
export type RunView = typeof RunView.Type

export const RunList = Schema.Struct({ runs: Schema.Array(RunView) })

/**
 * The body of `POST /v1/runs/{id}/slots/{slot}`: the slot's secret (a link's
 * holder; the responder the slot was asked of and an admin answer with their own
 * key and send none) and one response: `submit` an answer matching the slot's
 * answer shape, `accept` it (answering within `etaSeconds`), or `decline` it with
 * a reason.
 */
export const SlotResponse = Schema.Struct({
  secret: Schema.optional(Schema.String),
  response: Schema.Union(
    Schema.Struct({ kind: Schema.Literal("submit"), answer: Schema.Unknown }),
    Schema.Struct({ kind: Schema.Literal("accept"), etaSeconds: Schema.Number }),
    Schema.Struct({
      kind: Schema.Literal("decline"),
      reason: Schema.Literal("out_of_domain", "overbooked", "conflict_of_interest", "other")
    })
  )
})

export const SlotOutcome = Schema.Struct({ outcome: Schema.Literal("Accepted", "Declined"), run: RunView })

const RunId = Schema.Struct({ id: Schema.String })
const runRefusals = Schema.Union(...refusalStatuses.map(RunFailure.at))

export const listRuns = HttpApiEndpoint.get("listRuns", "/v1/runs").addSuccess(RunList).addError(runRefusals)

/**
 * The body of `POST /v1/runs`: the name of a definition the server offers to be
 * started (`Http.Options.definitions`) and its input, checked by the definition's
 * payload Schema. The run is the caller's.
 */
export const StartRun = Schema.Struct({ definition: Schema.String, input: Schema.Unknown })

export const startRun = HttpApiEndpoint.post("startRun", "/v1/runs")
  .setPayload(StartRun)
  .addSuccess(RunView, { status: 202 })
  .addError(runRefusals)

export const showRun = HttpApiEndpoint.get("showRun", "/v1/runs/:id").setPath(RunId).addSuccess(RunView).addError(runRefusals)

/** Server-sent events: each record of the run's thread (`id` its seq), then `end` with the run. */
export const runEvents = HttpApiEndpoint.get("runEvents", "/v1/runs/:id/events")
  .setPath(RunId)
  .addSuccess(Schema.String.pipe(HttpApiSchema.withEncoding({ kind: "Text", contentType: "text/event-stream" })))
  .addError(runRefusals)

export const cancelRun = HttpApiEndpoint.post("cancelRun", "/v1/runs/:id/cancel").setPath(RunId).addSuccess(RunView).addError(runRefusals)

export const respondToSlot = HttpApiEndpoint.post("respondToSlot", "/v1/runs/:id/slots/:slot")
  .setPath(Schema.Struct({ id: Schema.String, slot: Schema.String }))
  .setPayload(SlotResponse)
  .addSuccess(SlotOutcome)
  .addError(runRefusals)

/**
 * The durable runs: list, show, follow (SSE), cancel, answer a slot. Served when
 * the server has `Runs` (a 404 naming what is missing otherwise).
 */
export class RunsGroup extends HttpApiGroup.make("runs")
  .add(listRuns)
  .add(startRun)
  .add(showRun)
  .add(runEvents)
  .add(cancelRun)
  .add(respondToSlot)
{}

// ---------------------------------------------------------------------------
// Human responders
// ---------------------------------------------------------------------------

/**
 * A responder's inbox as server-sent events: `open`, then a `slot` event for each
 * slot the responder is asked to answer (run, slot, deadline, question, links;
 * never the slot's secret). Only that responder's principal and an admin read it
 * (404 for anyone else). Served when the server has Notifications (a 404 naming
 * what is missing otherwise).
 */
export const responderInbox = HttpApiEndpoint.get("responderInbox", "/v1/responders/:id/inbox")
  .setPath(RunId)
  .addSuccess(Schema.String.pipe(HttpApiSchema.withEncoding({ kind: "Text", contentType: "text/event-stream" })))
  .addError(runRefusals)

export class RespondersGroup extends HttpApiGroup.make("responders").add(responderInbox) {}

export class PaganticApi extends HttpApi.make("pagantic")
  .add(PaganticGroup)
  .add(ModelsGroup)
  .add(RunsGroup)
  .add(RespondersGroup)
{}
