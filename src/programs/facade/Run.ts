/**
 * One request, start to end: its ids, correlation and span; the request
 * registered for cancellation; its checks and mode run under its timeout, raced
 * against its cancel signal, tracked by its lifecycle, with the request's tool
 * whitelist on the registry; then its response.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Deferred from "effect/Deferred"
import { Cancellation } from "../../domain/Failure.js"
import type { SystemRequest } from "../../domain/System.js"
import * as Engine from "../../services/Engine.js"
import { withCorrelation } from "../../services/EventLog.js"
import * as ToolRegistry from "../../services/ToolRegistry.js"
import * as Spans from "../internal/Spans.js"
import * as Lifecycle from "../Lifecycle.js"
import type { Cancellations } from "./Cancellations.js"
import * as Check from "./Check.js"
import type { Environment } from "./Environment.js"
import * as Hints from "./Hints.js"
import * as Inferences from "./Inferences.js"
import * as Modes from "./Modes.js"
import * as Response from "./Response.js"
import * as Spent from "./Spent.js"
import type { Execution, RunOptions } from "./Types.js"

const executeChecked = (
  env: Environment,
  cancellations: Cancellations,
  request: SystemRequest,
  requestId: string,
  admission: Check.Admission,
  runOptions: RunOptions
): Effect.Effect<Execution> =>
  Effect.gen(function* () {
    const startedAt = yield* Clock.currentTimeMillis
    const tracker = yield* Lifecycle.makeTracker
    const partial = yield* Ref.make("")
    const { signal, cancelledEarly } = yield* cancellations.register(requestId)
    // every inference the request causes carries its hints, is observed once and is recorded, whichever engine makes it:
    // the request's own, and the engines services hold (Engine.inRequest), a query's responders' too
    const spent = yield* Spent.make
    const hints = Hints.effective(request.hints)
    const inThisRequest = (engine: Engine.Service) => spent.engine(Hints.engine(Inferences.observed(engine), hints))
    const checked = Either.map(admission.checked, (c): Check.Checked =>
      c.mode === "query" ? c : { ...c, engine: Engine.inRequest(c.engine) })

    const timeout = request.hints.timeout
    const body = Modes.route(env, checked, partial, tracker, runOptions)
    const timed = timeout === undefined || Duration.toMillis(timeout) === 0
      ? body
      : Effect.timeoutFail(body, {
        duration: timeout,
        onTimeout: () => Cancellation.timeout(`The request exceeded its timeout of ${Duration.format(timeout)}`, { requestId })
      })
    const cancellable = cancelledEarly
      ? Effect.failSync(() => Cancellation.signal("The request was cancelled by its caller before it started", { requestId }))
      : Effect.raceFirst(
        timed,
        Effect.zipRight(
          Deferred.await(signal),
          Effect.failSync(() => Cancellation.signal("The request was cancelled by its caller", { requestId }))
        )
      )

    // the request's whitelist holds in every mode and every step kind
    const context = Option.isSome(env.registry)
      ? Context.add(env.context, ToolRegistry.ToolRegistry, spent.registry(ToolRegistry.restrict(env.registry.value, request.tools)))
      : env.context
    const exit = yield* Effect.exit(
      cancellable.pipe(
        Lifecycle.tracked(tracker),
        Effect.provide(context),
        Effect.onInterrupt(() => tracker.interrupted),
        Effect.locally(Engine.currentRequest, inThisRequest)
      )
    )
    yield* cancellations.finish(requestId)

    const response = yield* Response.respond({ requestId, sessionId: admission.sessionId }, exit, tracker, partial, spent)
    yield* Response.observe(response, startedAt)
    return {
      response,
      state: yield* tracker.state,
      transitions: yield* tracker.history
    } satisfies Execution
  })

/**
 * Runs a request to its Execution, under its correlation and its `Facade.run`
 * span, in the request's trace: the trace its trace id names (see
 * `Spans.w3cTraceId`), else the trace of the span it runs in.
 */
export const execute = (
  env: Environment,
  cancellations: Cancellations,
  request: SystemRequest,
  runOptions: RunOptions
): Effect.Effect<Execution> =>
  Effect.gen(function* () {
    const requestId = request.requestId ?? (yield* env.nextId("req"))
    const admission = yield* Check.check(env, request)
    const { sessionId } = admission
    const run = Effect.gen(function* () {
      // without a trace id of its own the request is in its span's trace: events and spans name the same trace
      const spanTrace = Option.filter(
        Option.map(yield* Effect.option(Effect.currentSpan), (span) => span.traceId),
        (id) => /^[0-9a-f]{32}$/.test(id)
      )
      const traceId = request.traceId ?? (Option.isSome(spanTrace) ? spanTrace.value : yield* env.nextId("trace"))
      yield* Effect.annotateCurrentSpan({ traceId, [Spans.Pagantic.traceId]: traceId })
      return yield* executeChecked(env, cancellations, request, requestId, admission, runOptions).pipe(
        withCorrelation({ requestId, traceId, ...(sessionId === undefined ? {} : { sessionId }) })
      )
    }).pipe(
      Effect.withSpan("Facade.run", {
        captureStackTrace: false,
        attributes: {
          mode: request.mode,
          requestId,
          ...(sessionId === undefined ? {} : { sessionId }),
          [Spans.Pagantic.mode]: request.mode,
          [Spans.Pagantic.requestId]: requestId,
          ...(sessionId === undefined ? {} : { [Spans.Pagantic.sessionId]: sessionId })
        }
      })
    )
    // a trace id of its own is the request's OpenTelemetry trace, as a traceparent's is
    return yield* request.traceId === undefined ? run : Spans.inTrace(request.traceId)(run)
  })
