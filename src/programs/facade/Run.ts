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
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Option from "effect/Option"
import { Cancellation, type Failure } from "../../domain/Failure.js"
import * as Construct from "../../domain/Construct.js"
import { CorrelationContext } from "../../domain/System.js"
import type { SystemRequest, SystemResponse } from "../../domain/System.js"
import * as Engine from "../../services/Engine.js"
import { currentCorrelation, withCorrelation } from "../../services/EventLog.js"
import * as ToolRegistry from "../../services/ToolRegistry.js"
import * as Observed from "../internal/Observed.js"
import * as Spans from "../internal/Spans.js"
import * as Lifecycle from "../Lifecycle.js"
import type { Cancellations, Registration } from "./Cancellations.js"
import * as Check from "./Check.js"
import type { Environment } from "./Environment.js"
import * as Hints from "./Hints.js"
import * as Inferences from "./Inferences.js"
import * as Modes from "./Modes.js"
import * as Partial from "./Partial.js"
import * as Response from "./Response.js"
import * as Spent from "./Spent.js"
import type { Execution, Outcome, RunOptions } from "./Types.js"
import * as Tracing from "../../services/internal/Tracing.js"
import * as Start from "../../services/internal/Start.js"

/** What a request ends with, made from its response and its tracker (in COMPLETE, ERROR or CANCELLED). */
export type Finish<A> = (response: SystemResponse, tracker: Lifecycle.Tracker) => Effect.Effect<A>

/** The request's Execution (`Facade.execute`): its response, its lifecycle state and moves. */
export const toExecution: Finish<Execution> = Effect.fnUntraced(function*(response, tracker) {
  return { response, state: yield* tracker.state, transitions: yield* tracker.history }
})

/** The request's response alone (`Facade.run`). */
export const toResponse: Finish<SystemResponse> = (response) => Effect.succeed(response)

/**
 * Runs a request to its end, under its correlation and its `Facade.run` span,
 * in the request's trace: the trace its trace id names (see
 * `Spans.w3cTraceId`), else the trace of the span it runs in. The span is
 * opened when somebody observes: the facade's services or the caller's context
 * record events or metrics, or a tracer exports.
 */
export const execute = Effect.fnUntraced(function*<A>(
  env: Environment,
  cancellations: Cancellations,
  request: SystemRequest,
  runOptions: RunOptions,
  finish: Finish<A>
) {
  const requestId = request.requestId ?? (yield* env.nextId("req"))
  const admission = yield* Check.check(env, request)
  const executed = executeChecked(env, cancellations, request, requestId, admission, runOptions, finish)
  // the request's span only when somebody observes (see internal/Observed): else its id would stamp nothing
  const observed = env.recording || (yield* Observed.listened)
  const run = observed ? observedRun(env, request, requestId, admission.sessionId, executed) : executed
  // a trace id of its own is the request's OpenTelemetry trace, as a traceparent's is
  return yield* request.traceId === undefined ? run : Spans.inTrace(request.traceId)(run)
})

/** A checked request run to its end (`finish`). */
const executeChecked = Effect.fnUntraced(function*<A>(
  env: Environment,
  cancellations: Cancellations,
  request: SystemRequest,
  requestId: string,
  admission: Check.Admission,
  runOptions: RunOptions,
  finish: Finish<A>
) {
  const startedAt = yield* Clock.currentTimeMillis
  const tracker = yield* Lifecycle.makeTracker
  const registration = yield* cancellations.register(requestId)
  const partial = Partial.make()
  // every inference the request causes carries its hints, is observed once and is recorded, whichever engine makes
  // it: the request's own, and the engines services hold (Engine.inRequest), a query's responders' too
  const spent = yield* Spent.make
  const hints = Hints.effective(request.hints)
  const inThisRequest = wrappedOnce((engine) => spent.engine(Hints.engine(Inferences.observed(engine), hints)))

  const hinted = request.hints.timeout
  const timeout = hinted === undefined || Duration.toMillis(hinted) === 0 ? undefined : Duration.decode(hinted)
  const checked = admission.checked
  // the engine a mode runs on is in its context (every mode but a query runs on the facade's engine)
  const base = Either.isRight(checked) && checked.right.mode !== "query" ? env.contextWithEngine : env.context
  // the request's whitelist holds in every mode and every step kind
  const context: Context.Context<never> = (Option.isSome(env.registry)
    ? Context.add(base, ToolRegistry.ToolRegistry, spent.registry(ToolRegistry.restrict(env.registry.value, request.tools)))
    : base) as Context.Context<never>
  // the request's fiber starts with its services, its engines' wrapper, its tracker and its correlation
  const seed = (parent: Fiber.RuntimeFiber<unknown, unknown>): Start.Seed => ({
    // merged once for the requests from one caller's context
    context: env.requestContexts.merge(parent.currentContext, context as Context.Context<unknown>),
    refs: [
      [Engine.currentRequest, inThisRequest],
      [Lifecycle.currentTracker, Option.some(tracker)],
      [currentCorrelation, correlationOf(parent.getFiberRef(currentCorrelation), requestId, admission.sessionId)]
    ]
  })
  // its services are in `context`
  const body = Modes.route(env, checked, partial, tracker, runOptions) as Effect.Effect<Outcome, Failure>

  const exit = registration.cancelledEarly
    ? Exit.fail(Cancellation.signal("The request was cancelled by its caller before it started", { requestId }))
    : yield* cancellable(body, seed, registration, requestId, timeout, tracker.interrupted)
  // the request is over: later cancels for its id are dropped
  yield* cancellations.finish(requestId)
  const response = yield* Response.respond({ requestId, sessionId: admission.sessionId }, exit, tracker, partial, spent)
  yield* Response.observe(response, startedAt)
  return yield* finish(response, tracker)
})

/**
 * `effect` in a fiber of its own, which a cancel of the request or its timeout
 * interrupts: the request then ends in CANCELLED_SIGNAL or CANCELLED_TIMEOUT,
 * whichever came first (unless it ended before). Interrupting the caller runs
 * `interrupted` (the open state's span ends first, as its parent), then
 * interrupts the fiber and waits for it.
 */
const cancellable = <A>(
  effect: Effect.Effect<A, Failure>,
  seed: (parent: Fiber.RuntimeFiber<unknown, unknown>) => Start.Seed,
  registration: Registration,
  requestId: string,
  timeout: Duration.Duration | undefined,
  interrupted: Effect.Effect<void>
): Effect.Effect<Exit.Exit<A, Failure>> => {
  const timed = timeout === undefined ? effect : Effect.timeoutFail(effect, {
    duration: timeout,
    onTimeout: () => Cancellation.timeout(`The request exceeded its timeout of ${Duration.format(timeout)}`, { requestId })
  })
  return Effect.withFiberRuntime((parent, status) =>
    // started and awaited in an uninterruptible region (so that it is never left running), in the caller's flags
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        // started on the caller's stack with its services and refs set once (Effect.fork schedules its fiber, and
        // each Effect.locally copies the fiber's refs twice): the facade row doubles its plain equivalent without it
        const fiber = Start.now(parent, status.runtimeFlags, timed, seed(parent))
        let cancelled = false
        registration.onCancel(() => {
          cancelled = true
          // called in the cancelling fiber's step (at once, if the cancel came before this): no fiber waits on a signal
          fiber.unsafeInterruptAsFork(FiberId.none)
        })
        // a request that did not suspend (a model that answers at once) has ended already: no wait for it
        const polled = yield* Fiber.poll(fiber)
        const exit = Option.isSome(polled)
          ? polled.value
          : yield* Effect.onInterrupt(restore(Fiber.await(fiber)), () => Effect.zipRight(interrupted, Fiber.interrupt(fiber)))
        return cancelled && Exit.isInterrupted(exit)
          ? Exit.fail(Cancellation.signal("The request was cancelled by its caller", { requestId }))
          : exit
      })
    )
  )
}

/** An engine wrapper that wraps each engine once for the request (most requests call one engine, at every inference). */
const wrappedOnce = (wrap: (engine: Engine.Service) => Engine.Service) => {
  let wrappedOf: Engine.Service | undefined
  let wrapped: Engine.Service | undefined
  return (engine: Engine.Service): Engine.Service => {
    if (wrapped === undefined || wrappedOf !== engine) {
      wrappedOf = engine
      wrapped = wrap(engine)
    }
    return wrapped
  }
}

/** The request's correlation: the caller's, naming the request and its session (a value built by us: not validated again). */
const correlationOf = (outer: CorrelationContext, requestId: string, sessionId: string | undefined): CorrelationContext =>
  Construct.unchecked(CorrelationContext, sessionId === undefined ? { ...outer, requestId } : { ...outer, requestId, sessionId })

/** A request run under its correlation and span, in its trace (see `execute`). */
const observedRun = <A>(
  env: Environment,
  request: SystemRequest,
  requestId: string,
  sessionId: string | undefined,
  executed: Effect.Effect<A>
): Effect.Effect<A> =>
  Effect.gen(function*() {
    // without a trace id of its own the request is in its span's trace: events and spans name the same trace
    const spanTrace = Option.filter(
      Option.map(yield* Effect.option(Effect.currentSpan), (span) => span.traceId),
      (id) => /^[0-9a-f]{32}$/.test(id)
    )
    const traceId = request.traceId ?? (Option.isSome(spanTrace) ? spanTrace.value : yield* env.nextId("trace"))
    yield* Tracing.annotate({ traceId, [Spans.Pagantic.traceId]: traceId })
    return yield* executed.pipe(withCorrelation({ requestId, traceId, ...(sessionId === undefined ? {} : { sessionId }) }))
  }).pipe(
    Tracing.withSpan("Facade.run", {
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
