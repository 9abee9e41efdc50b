/**
 * How a human responder hears about a query: the channel rule (see the
 * Notifications service, where it lives so the channel layers can apply it).
 * SSE if the responder's page is connected, else their push channels, else a
 * digest past an hour of wait, else polling.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type { Failure } from "../../domain/Failure.js"
import type * as Records from "../../domain/Records.js"
import type { Slot } from "../../services/Durable.js"
import type { Service as NotificationsService } from "../../services/Notifications.js"
import type { Responder } from "../../services/ResponderRegistry.js"

export { type Channel, digestAfterSecs, type Reach, selectChannel } from "../../services/Notifications.js"

/** What a human responder is told of a CALL: where to answer, what, by when. */
export interface Notice {
  readonly slot: Slot
  readonly call: Records.Call
  readonly responder: Responder
  /** The question as the responder sees it. */
  readonly input: string
}

/**
 * The `notify` option of an orchestration that hands every human CALL to a
 * Notifications service: the slot, its secret and deadline, the question, and the
 * wait left (which picks a digest or polling when nothing else reaches the human).
 */
export const notifyThrough = (service: NotificationsService) => (notice: Notice): Effect.Effect<void, Failure> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.asVoid(service.notify({
      responder: notice.responder.id,
      runId: notice.slot.runId,
      slot: notice.slot.key,
      secret: notice.slot.secret,
      deadline: notice.slot.deadline.epochMillis,
      call: notice.call.id,
      input: notice.input,
      maxLatencySecs: Math.max(0, (notice.slot.deadline.epochMillis - now) / 1000)
    })))
