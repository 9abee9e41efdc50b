/**
 * A trace file: what the runs page draws, kept after the server is gone. It is
 * the events the EventLog recorded and, optionally, durable runs with their
 * thread records, as JSON, in one of two forms:
 *
 *   - a JSON object `{ "events": [...], "runs": [{ "run", "records" }] }` (`runs`
 *     optional): what `GET /v1/events` answers, so
 *     `curl -H "Authorization: Bearer $KEY" http://127.0.0.1:8080/v1/events > trace.json`
 *     writes one;
 *   - JSON lines, one event a line, or `{ "_tag": "Run", "run", "records" }` for
 *     a run: what the page's "Download trace" button writes.
 *
 * Every event is checked against the Event schema and every run against the
 * runs routes' shapes; a bad one is refused naming its line (or index) and field.
 * The newest `maxTraceEvents` events and `maxTraceRuns` runs are kept.
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { Event } from "../../domain/Event.js"
import * as Json from "../../domain/Json.js"
import * as Text from "../../domain/Text.js"
import { ThreadRecord } from "../../services/Runs.js"
import { RunView } from "./Api.js"
import type { Trace } from "./Page.js"

/** Most events a trace keeps (the newest). */
export const maxTraceEvents = 10_000

/** Most runs a trace keeps, and records per run. */
export const maxTraceRuns = 1_000
export const maxTraceRecords = 10_000

/** Why a trace file was refused: where (a line or an index) and what. */
export interface TraceProblem {
  readonly where: string
  readonly message: string
}

const encodeEvent = Schema.encodeSync(Event)

/** The event types by tag: an event is decoded by its own type, so a problem names its field. */
const eventTypes = new Map<string, Schema.Schema<Event, any>>(Event.members.map((member) => [member._tag, member as Schema.Schema<Event, any>]))

const decodeEvent = (value: Record<string, unknown>): Either.Either<Event, string> => {
  const type = typeof value._tag === "string" ? eventTypes.get(value._tag) : undefined
  if (type === undefined) {
    return Either.left(
      `_tag: expected one of ${[...eventTypes.keys(), "Run"].join(", ")}, got ${Text.excerpt(JSON.stringify(value._tag) ?? "nothing", 40)}`
    )
  }
  return Either.mapLeft(Schema.decodeUnknownEither(type, { errors: "all" })(value), describe)
}
const decodeRun = Schema.decodeUnknownEither(RunView)
const decodeRecord = Schema.decodeUnknownEither(ThreadRecord)
const encodeRecord = Schema.encodeSync(ThreadRecord)

/** A decoding error as its first few issues, each with the field it is about. */
const describe = (error: ParseResult.ParseError): string =>
  Text.excerpt(
    ParseResult.ArrayFormatter.formatErrorSync(error)
      .slice(0, 3)
      .map((issue) => `${issue.path.length === 0 ? "" : `${issue.path.join(".")}: `}${issue.message}`)
      .join("; "),
    300
  )

/** One entry (an event or a run) checked, at `where`. */
const entry = (
  value: unknown,
  where: string
): Either.Either<{ readonly event: unknown } | { readonly run: Trace["runs"][number] }, TraceProblem> => {
  if (!Json.isObject(value)) return Either.left({ where, message: "expected a JSON object (an event or a run)" })
  if (value._tag === "Run") return Either.map(run(value, where), (run) => ({ run }))
  return Either.match(decodeEvent(value), {
    onLeft: (problem) => Either.left({ where, message: `not an event: ${problem}` }),
    onRight: (event) => Either.right({ event: encodeEvent(event) })
  })
}

const run = (value: Record<string, unknown>, where: string): Either.Either<Trace["runs"][number], TraceProblem> => {
  const view = decodeRun(value.run)
  if (Either.isLeft(view)) return Either.left({ where: `${where}, run`, message: `not a run: ${describe(view.left)}` })
  const records = value.records ?? []
  if (!Array.isArray(records)) return Either.left({ where: `${where}, records`, message: "expected an array of thread records" })
  const kept: Array<unknown> = []
  for (const [i, record] of records.slice(-maxTraceRecords).entries()) {
    const decoded = decodeRecord(record)
    if (Either.isLeft(decoded)) {
      return Either.left({ where: `${where}, records[${i}]`, message: `not a thread record: ${describe(decoded.left)}` })
    }
    kept.push(encodeRecord(decoded.right))
  }
  return Either.right({ run: Schema.encodeSync(RunView)(view.right), records: kept })
}

const gather = (
  entries: ReadonlyArray<readonly [unknown, string]>
): Either.Either<Trace, TraceProblem> => {
  const events: Array<unknown> = []
  const runs: Array<Trace["runs"][number]> = []
  for (const [value, where] of entries) {
    const checked = entry(value, where)
    if (Either.isLeft(checked)) return Either.left(checked.left)
    if ("event" in checked.right) events.push(checked.right.event)
    else runs.push(checked.right.run)
  }
  return Either.right({ events: events.slice(-maxTraceEvents), runs: runs.slice(-maxTraceRuns) })
}

const parseLine = (line: string, where: string): Either.Either<unknown, TraceProblem> =>
  Either.try({
    try: () => JSON.parse(line) as unknown,
    catch: () => ({ where, message: `not JSON: ${JSON.stringify(Text.excerpt(line, 60))}` })
  })

/** A trace file's text (a JSON object or JSON lines) as the page's data, or why not. */
export const parseTrace = (text: string): Either.Either<Trace, TraceProblem> => {
  const trimmed = text.trim()
  if (trimmed.length === 0) return Either.left({ where: "the file", message: "it is empty: expected JSON events" })
  const whole = Either.try(() => JSON.parse(trimmed) as unknown)
  if (Either.isRight(whole) && Json.isObject(whole.right) && Array.isArray(whole.right.events)) {
    const { events, runs } = whole.right
    if (runs !== undefined && !Array.isArray(runs)) return Either.left({ where: "runs", message: "expected an array of runs" })
    return gather([
      ...events.map((e, i) => [e, `events[${i}]`] as const),
      ...(runs ?? []).map((r, i) => [Json.isObject(r) ? { ...r, _tag: "Run" } : r, `runs[${i}]`] as const)
    ])
  }
  const entries: Array<readonly [unknown, string]> = []
  for (const [i, line] of trimmed.split("\n").entries()) {
    if (line.trim().length === 0) continue
    const value = parseLine(line, `line ${i + 1}`)
    if (Either.isLeft(value)) return Either.left(value.left)
    entries.push([value.right, `line ${i + 1}`])
  }
  return gather(entries)
}
