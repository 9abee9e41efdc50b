/**
 * An orchestration event: a `Custom` event of the `orchestrate` layer in the
 * EventLog, with its action, what it is about (`data`), and optionally how long
 * the work took and the error it ended with. The plan executor's steps and the
 * orchestrator's agents record their start and end this way.
 */
import type * as Effect from "effect/Effect"
import * as Event from "../../domain/Event.js"
import { recordEvent } from "../../services/EventLog.js"

/** How long the work took and the error it ended with, when known. */
export interface Extra {
  readonly durationMs?: number | undefined
  readonly error?: string | undefined
}

/**
 * Records an `orchestrate` Custom event; an absent `durationMs` or `error` is left out of the event.
 * `data` may be given as a function, called only when an EventLog keeps the event (a payload built
 * from the run's values costs nothing when nobody records).
 */
export const record = (
  action: string,
  data: Record<string, unknown> | (() => Record<string, unknown>),
  extra: Extra = {}
): Effect.Effect<void> =>
  recordEvent((base) =>
    new Event.Custom({
      ...base,
      layer: "orchestrate",
      action,
      ...(extra.durationMs === undefined ? {} : { durationMs: extra.durationMs }),
      ...(extra.error === undefined ? {} : { error: extra.error }),
      data: typeof data === "function" ? data() : data
    })
  )
