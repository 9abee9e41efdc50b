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
import * as RuntimeFlags from "effect/RuntimeFlags"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import type * as FiberRef from "effect/FiberRef"
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
import * as Start from "../../services/internal/Start.js"
import * as Tracing from "../../services/internal/Tracing.js"

/**
 * Runs `effect` in a fiber of its own, which a cancel of the request or its
 * timeout interrupts: the request then ends in CANCELLED_SIGNAL or
 * CANCELLED_TIMEOUT, whichever came first (unless it ended before). Interrupting
 * the caller runs `interrupted`, then interrupts the fiber and waits for it. No
 * fiber waits on a cancel (a cancel calls the interrupt directly), and a timeout
 * is one sleeping fiber, stopped when the request ends (not a race of two).
 *
 * The fiber is started at once on the caller's stack (as `Runtime.runFork`
 * starts one, with the caller's context, fiber refs and runtime flags): a
 * request that does not suspend (a model that answers at once) has ended when
 * it returns, and nothing is forked or awaited for it.
 */
const cancellable = <A>(
  effect: Effect.Effect<A, Failure>,
  seed: (parent: Fiber.RuntimeFiber<unknown, unknown>) => Start.Seed,
  registration: Registration,
  requestId: string,
  timeout: Duration.Duration | undefined,
  interrupted: Effect.Effect<void>
): Effect.Effect<Exit.Exit<A, Failure>> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.withFiberRuntime((parent, status) => {
      // the fiber starts in the caller's own interruptibility (what `restore` gives back), set in its flags: no region
      // to restore it (two operations less)
      const flags = restore === Effect.interruptible
        ? RuntimeFlags.enable(status.runtimeFlags, RuntimeFlags.Interruption)
        : status.runtimeFlags
      const fiber = Start.now(parent, flags, effect, seed(parent))
      let ended: "cancelled" | "timed out" | undefined
      const end = (why: "cancelled" | "timed out") => {
        if (ended !== undefined) return
        ended = why
        fiber.unsafeInterruptAsFork(FiberId.none)
      }
      const settled = (exit: Exit.Exit<A, Failure>): Exit.Exit<A, Failure> =>
        ended === undefined || !Exit.isInterrupted(exit)
          ? exit
          : Exit.fail(
            ended === "cancelled"
              ? Cancellation.signal("The request was cancelled by its caller", { requestId })
              : Cancellation.timeout(`The request exceeded its timeout of ${Duration.format(timeout!)}`, { requestId })
          )
      // a cancel that came before the request started interrupts it now
      registration.onCancel(() => end("cancelled"))
      const done = fiber.unsafePoll()
      if (done !== null) return Effect.succeed(settled(done))
      const awaited = Effect.onInterrupt(restore(Fiber.await(fiber)), () => Effect.zipRight(interrupted, Fiber.interrupt(fiber)))
      const watched = timeout === undefined
        ? awaited
        // interruptible whatever the caller's region is, so that it can be stopped
        : Effect.flatMap(
          Effect.fork(Effect.interruptible(Effect.zipRight(Effect.sleep(timeout), Effect.sync(() => end("timed out"))))),
          (timer) => Effect.ensuring(awaited, Effect.sync(() => timer.unsafeInterruptAsFork(FiberId.none)))
        )
      return Effect.map(watched, settled)
    })
  )

/**
 * What a request ends with, made from its response and its tracker (in COMPLETE, ERROR or CANCELLED): the
 * Execution (`Facade.execute`), or the response alone (`Facade.run`, which builds no state nor transitions).
 * `now` when nobody observes the tracker (read in the step that ends the request), `read` otherwise.
 */
export interface Finish<A> {
  readonly now: (response: SystemResponse, tracker: Lifecycle.Tracker) => A
  readonly read: (response: SystemResponse, tracker: Lifecycle.Tracker) => Effect.Effect<A>
}

/** The request's Execution: its response, its lifecycle state and moves. */
export const toExecution: Finish<Execution> = {
  now: (response, tracker) => ({ response, state: tracker.unsafeState(), transitions: tracker.unsafeHistory() }),
  read: (response, tracker) =>
    Effect.flatMap(tracker.state, (state) => Effect.map(tracker.history, (transitions) => ({ response, state, transitions })))
}

/** The request's response alone. */
export const toResponse: Finish<SystemResponse> = {
  now: (response) => response,
  read: (response) => Effect.succeed(response)
}

/** The request's correlation: the caller's, naming the request and its session (a value built by us: not validated again). */
const correlationOf = (outer: CorrelationContext, requestId: string, sessionId: string | undefined): CorrelationContext =>
  Construct.unchecked(CorrelationContext, sessionId === undefined ? { ...outer, requestId } : { ...outer, requestId, sessionId })

/** A checked request run to its end (`finish`), from inside a step of `fiber`. */
const executeCheckedIn = <A>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  env: Environment,
  cancellations: Cancellations,
  request: SystemRequest,
  requestId: string,
  admission: Check.Admission,
  runOptions: RunOptions,
  finish: Finish<A>
): Effect.Effect<A> => {
  // the request's own state is made in the step that reads the clock and makes the tracker (no step of its own each)
  const startedAt = Context.get(fiber.currentDefaultServices, Clock.Clock).unsafeCurrentTimeMillis()
  const withTracker = (tracker: Lifecycle.Tracker): Effect.Effect<A> => {
    const partial = Partial.make()
    const registration = cancellations.unsafeRegister(requestId, startedAt)
    // every inference the request causes carries its hints, is observed once and is recorded, whichever engine makes it:
    // the request's own, and the engines services hold (Engine.inRequest), a query's responders' too
    const spent = Spent.unsafeMake()
    const hints = Hints.effective(request.hints)
    // an engine wrapped once for the request (most requests call one engine, at every inference)
    let wrappedOf: Engine.Service | undefined
    let wrapped: Engine.Service | undefined
    const inThisRequest = (engine: Engine.Service) => {
      if (wrapped === undefined || wrappedOf !== engine) {
        wrappedOf = engine
        wrapped = spent.engine(Hints.engine(Inferences.observed(engine), hints))
      }
      return wrapped
    }
    // the modes' engine follows the request already (Environment.engine): its calls made the way `inThisRequest` says
    const checked = admission.checked

    const hinted = request.hints.timeout
    const timeout = hinted === undefined || Duration.toMillis(hinted) === 0 ? undefined : Duration.decode(hinted)
    const body = Modes.route(env, checked, partial, tracker, runOptions)

    // the engine a mode runs on is in its context (Modes.route provides none: no region for it); a query's is not
    const base = Either.isRight(checked) && checked.right.mode !== "query" ? env.contextWithEngine : env.context
    // the request's whitelist holds in every mode and every step kind
    const context: Context.Context<never> = (Option.isSome(env.registry)
      ? Context.add(base, ToolRegistry.ToolRegistry, spent.registry(ToolRegistry.restrict(env.registry.value, request.tools)))
      : base) as Context.Context<never>
    const ran: Effect.Effect<Exit.Exit<Outcome, Failure>> = registration.cancelledEarly
      ? Effect.succeed(Exit.fail(Cancellation.signal("The request was cancelled by its caller before it started", { requestId })))
      : cancellable(
        // `body` needs the Constraint, which env.context holds
        body as Effect.Effect<Outcome, Failure>,
        // the request's fiber starts with its services, its engines' wrapper, its tracker and its correlation (no
        // region to set them; a chat turn finds its session named already and sets nothing: agent/TurnScope)
        (parent) => {
          const outer = parent.getFiberRef(currentCorrelation)
          const refs: Array<readonly [FiberRef.FiberRef<any>, unknown]> = [
            [Engine.currentRequest, inThisRequest],
            [Lifecycle.currentTracker, Option.some(tracker)]
          ]
          if (outer.requestId !== requestId || outer.sessionId !== admission.sessionId) {
            refs.push([currentCorrelation, correlationOf(outer, requestId, admission.sessionId)])
          }
          return {
            // merged once for the requests from one caller's context (a per-request registry's makes it a new one)
            context: env.requestContexts.merge(parent.currentContext, context as Context.Context<unknown>),
            refs
          }
        },
        registration,
        requestId,
        timeout,
        tracker.interrupted
      )
    const to: Response.Addressee = { requestId, sessionId: admission.sessionId }
    return Effect.flatMap(ran, (exit) => Effect.withFiberRuntime((fiber) => {
      // the request is over: in this step, before its response is made
      cancellations.unsafeFinish(requestId)
      // an answer nobody observes is made in this step: the move to COMPLETE, the response, the state read
      if (Exit.isSuccess(exit) && tracker.unsafeTransition(fiber, "COMPLETE") !== undefined) {
        return Effect.succeed(finish.now(Response.answer(to, exit.value, spent), tracker))
      }
      return Effect.flatMap(
        Response.respond(to, exit, tracker, partial, spent),
        (response) => Effect.zipRight(Response.observe(response, startedAt), finish.read(response, tracker))
      )
    }))
  }
  // the tracker made in this step when nobody observes (its states are no spans then)
  const quiet = Lifecycle.unsafeMakeTracker(fiber)
  return quiet !== undefined ? withTracker(quiet) : Effect.flatMap(Lifecycle.makeTracker, withTracker)
}

/**
 * Runs a request to its Execution, under its correlation and its `Facade.run`
 * span, in the request's trace: the trace its trace id names (see
 * `Spans.w3cTraceId`), else the trace of the span it runs in. The span is
 * opened when somebody observes: the facade's services or the caller's context
 * record events or metrics, or a tracer exports.
 */
export const execute = <A>(
  env: Environment,
  cancellations: Cancellations,
  request: SystemRequest,
  runOptions: RunOptions,
  finish: Finish<A>
): Effect.Effect<A> => {
  /** The admitted request, run from a step of `fiber`. */
  const admittedIn = (fiber: Fiber.RuntimeFiber<unknown, unknown>, requestId: string, admission: Check.Admission) => {
    const observed = env.recording || Observed.listenedBy(fiber)
    // nobody observes and no trace of its own: run from this very step
    if (!observed && request.traceId === undefined) {
      return executeCheckedIn(fiber, env, cancellations, request, requestId, admission, runOptions, finish)
    }
    const executed = Effect.withFiberRuntime<A>((inner) =>
      executeCheckedIn(inner, env, cancellations, request, requestId, admission, runOptions, finish))
    // the request's span only when somebody observes (see internal/Observed): else its id would stamp nothing
    const run = observed ? observedRun(env, request, requestId, admission.sessionId, executed) : executed
    // a trace id of its own is the request's OpenTelemetry trace, as a traceparent's is
    return request.traceId === undefined ? run : Spans.inTrace(request.traceId)(run)
  }
  const admitted = (requestId: string) =>
    Effect.flatMap(Check.check(env, request), (admission) =>
      Effect.withFiberRuntime<A>((fiber) => admittedIn(fiber, requestId, admission)))
  // its id drawn and its checks made in one step, when the IdGenerator draws ids at once (the default one does)
  return Effect.withFiberRuntime((fiber) => {
    const requestId = request.requestId ?? env.unsafeNextId?.("req")
    if (requestId === undefined) return Effect.flatMap(env.nextId("req"), admitted)
    const admission = Check.checkNow(env, request)
    return admission === undefined ? admitted(requestId) : admittedIn(fiber, requestId, admission)
  })
}

/** A request run under its correlation and span, in its trace (see `execute`). */
const observedRun = <A>(
  env: Environment,
  request: SystemRequest,
  requestId: string,
  sessionId: string | undefined,
  executed: Effect.Effect<A>
): Effect.Effect<A> => {
    // the trace id and the correlation are read by events and spans only
    const body = Effect.gen(() => observedSteps(env, request, requestId, sessionId, executed))
    return body.pipe(
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
  }

/** The steps of an observed request, one generator function for every request (a generator function made per call costs V8 new maps). */
function* observedSteps<A>(env: Environment, request: SystemRequest, requestId: string, sessionId: string | undefined, executed: Effect.Effect<A>) {
  // without a trace id of its own the request is in its span's trace: events and spans name the same trace
  const spanTrace = Option.filter(
    Option.map(yield* Effect.option(Effect.currentSpan), (span) => span.traceId),
    (id) => /^[0-9a-f]{32}$/.test(id)
  )
  const traceId = request.traceId ?? (Option.isSome(spanTrace) ? spanTrace.value : yield* env.nextId("trace"))
  yield* Tracing.annotate({ traceId, [Spans.Pagantic.traceId]: traceId })
  return yield* executed.pipe(withCorrelation({ requestId, traceId, ...(sessionId === undefined ? {} : { sessionId }) }))
}
