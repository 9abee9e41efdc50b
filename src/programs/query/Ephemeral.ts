/**
 * A query run for one request only, without durable runs.
 *
 * The patterns are written against Durable (every CALL and DO a step, every
 * deadline journaled). When an application has no Runs layer, a query can still
 * run: each step simply runs, times come from the Clock, and nothing outlives
 * the request. What cannot work without a journal is refused rather than
 * pretended: a human slot (nobody could answer it once the request is gone) is
 * CONFIG_INVALID_REQUEST, and a step key used twice in one run is a defect, as it
 * is on the durable substrate.
 */
import * as Clock from "effect/Clock"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { ConfigurationFailure } from "../../domain/Failure.js"
import type * as Durable from "../../services/Durable.js"

/** Why a human responder cannot be asked in an ephemeral run. */
export const noHumans = "a human (actor) responder needs durable runs (a Runs layer): nobody could answer its slot once this request ends"

/** A Durable for one in-memory run named `runId`. */
export const make = (runId: string): Effect.Effect<Durable.Service> =>
  Effect.sync(() => {
    const used = new Set<string>()
    const claim = (key: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (used.has(key)) return Effect.dieMessage(`run ${runId}: the step key "${key}" is used twice`)
        used.add(key)
        return Effect.void
      })
    const now = Effect.map(Clock.currentTimeMillis, (ms) => DateTime.unsafeMake(ms))
    const service: Durable.Service = {
      runId,
      step: (key, _schema, effect) => Effect.zipRight(claim(key), effect),
      now: (key) => Effect.zipRight(claim(key), now),
      deadline: (key, after) =>
        Effect.zipRight(claim(key), Effect.map(now, (at) => DateTime.addDuration(at, Duration.decode(after)))),
      slot: () => Effect.fail(ConfigurationFailure.invalidRequest(noHumans)),
      awaitAnswer: () => Effect.fail(ConfigurationFailure.invalidRequest(noHumans)),
      closeSlot: () => Effect.void,
      idempotencyKey: (key) => `${runId}/${key}`
    }
    return service
  })
