/**
 * Progress of long work on the command line: a live line on a terminal (a bar when
 * the total is known, counts and elapsed time), plain lines when standard error is
 * not a terminal (a log, CI, a pipe). It is written to standard error, so standard
 * output (`--json`) stays the result alone.
 *
 * `render` is pure (tests and scripts use it); `track` runs an effect with a
 * tracker it can advance; `Reporter` is the same for plain async scripts
 * (`npm run eval`).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import { CliIo } from "./Io.js"

/** What a progress line shows. */
export interface State {
  readonly label: string
  readonly done: number
  /** Absent when the amount of work is not known in advance. */
  readonly total?: number | undefined
  /** What is counted ("answers", "queries"). */
  readonly unit: string
  readonly elapsedMs: number
}

const BAR = 20

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`

/** The line for a state: `vote [########------------] 2/5 answers 1.2 s`, or `task 7 inferences 3.4 s`. */
export const render = (state: State): string => {
  if (state.total === undefined || state.total <= 0) {
    return `${state.label} ${state.done} ${state.unit} ${seconds(state.elapsedMs)}`
  }
  const ratio = Math.min(1, Math.max(0, state.done / state.total))
  const filled = Math.round(ratio * BAR)
  return `${state.label} [${"#".repeat(filled)}${"-".repeat(BAR - filled)}] ${state.done}/${state.total} ${state.unit} ${seconds(state.elapsedMs)}`
}

/** Advances a progress line. */
export interface Tracker {
  readonly advance: (by?: number) => Effect.Effect<void>
  /** Sets the count (a watcher that sees totals rather than steps); a count that does not move prints nothing. */
  readonly set: (done: number) => Effect.Effect<void>
}

/**
 * Runs `body` with a tracker. On a terminal the line is redrawn on each advance and
 * every 250 ms (the clock moves), and cleared at the end; otherwise each advance
 * prints one plain line. Interruption clears the line too.
 */
export const track = <A, E, R>(
  options: {
    readonly label: string
    readonly total?: number | undefined
    readonly unit: string
    /** Off a terminal, a plain line only when the count reaches a multiple of this (default 1: every step). */
    readonly every?: number | undefined
  },
  body: (tracker: Tracker) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R | CliIo> =>
  Effect.gen(function*() {
    const io = yield* CliIo
    const started = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const done = yield* Ref.make(0)
    const line = Effect.gen(function*() {
      const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
      return render({ ...options, done: yield* Ref.get(done), elapsedMs: now - started })
    })
    const status = io.status
    const every = Math.max(1, options.every ?? 1)
    const show = status === undefined ? Effect.flatMap(line, io.error) : Effect.flatMap(line, status)
    const moveTo = (next: (n: number) => number) =>
      Effect.flatMap(
        Ref.modify(done, (n) => [next(n) !== n && (status !== undefined || next(n) % every === 0), next(n)] as const),
        (moved) => moved ? show : Effect.void
      )
    const tracker: Tracker = { advance: (by = 1) => moveTo((n) => n + by), set: (count) => moveTo(() => count) }
    if (status === undefined) return yield* body(tracker)
    const ticker = yield* Effect.forkScoped(Effect.repeat(show, Schedule.spaced(Duration.millis(250))))
    return yield* body(tracker).pipe(
      Effect.ensuring(Effect.zipRight(Fiber.interrupt(ticker), status(undefined)))
    )
  }).pipe(Effect.scoped)

/** The same for plain async code (scripts): a live line on a TTY, plain lines otherwise. */
export class Reporter {
  private done = 0
  private readonly started = Date.now()
  private lastPlain = 0
  constructor(
    private readonly label: string,
    private readonly total: number | undefined,
    private readonly unit: string,
    private readonly stream: NodeJS.WriteStream = process.stderr
  ) {}

  advance(by = 1): void {
    this.done += by
    const text = render({ label: this.label, done: this.done, total: this.total, unit: this.unit, elapsedMs: Date.now() - this.started })
    if (this.stream.isTTY === true) {
      this.stream.write(`\r\x1b[2K${text}`)
      return
    }
    // plain lines: every tenth of the work (or every 10 when the total is unknown), and the last
    const step = this.total === undefined ? 10 : Math.max(1, Math.ceil(this.total / 10))
    if (this.done - this.lastPlain >= step || this.done === this.total) {
      this.lastPlain = this.done
      this.stream.write(`${text}\n`)
    }
  }

  /** Clears the live line (a TTY); plain output needs nothing. */
  end(): void {
    if (this.stream.isTTY === true) this.stream.write("\r\x1b[2K")
  }
}
