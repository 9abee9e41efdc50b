/**
 * A run seen as a stream of its events: the run is forked in the stream's scope
 * with an `emit` that offers into a mailbox, and its result is offered last as
 * the closing event. The run's failure fails the stream; the stream's consumer
 * going away (or being interrupted) interrupts the run.
 */
import * as Effect from "effect/Effect"
import * as Mailbox from "effect/Mailbox"
import * as Stream from "effect/Stream"

/** The events `run` emits, then `finished(result)`. */
export const fromEmitting = <Ev, A, E, R>(
  run: (emit: (event: Ev) => Effect.Effect<void>) => Effect.Effect<A, E, R>,
  finished: (result: A) => Ev
): Stream.Stream<Ev, E, R> =>
  Stream.unwrapScoped(
    Effect.gen(function* () {
      const mailbox = yield* Mailbox.make<Ev, E>()
      yield* run((event) => Effect.asVoid(mailbox.offer(event))).pipe(
        Effect.tap((result) => mailbox.offer(finished(result))),
        Mailbox.into(mailbox),
        Effect.forkScoped
      )
      return Mailbox.toStream(mailbox)
    })
  )
