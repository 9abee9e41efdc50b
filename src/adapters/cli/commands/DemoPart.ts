/**
 * One part of the demo: a heading, an introduction, a request on the facade,
 * timed, and what came back printed.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type { SystemResponse } from "../../../domain/System.js"
import type * as Facade from "../../../programs/Facade.js"
import { decodeRequest } from "../Input.js"
import { CliIo } from "../Io.js"
import { formatUsage, print, seconds } from "../Output.js"
import { runRequest } from "../Wiring.js"

export const timed = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const start = yield* Clock.currentTimeMillis
    const a = yield* self
    return [a, (yield* Clock.currentTimeMillis) - start] as const
  })

export const heading = (title: string) => print(`\n== ${title}`)

/** Runs one part of the demo: its request on the facade, timed; prints what happened. */
export const demoPart = (
  title: string,
  intro: string,
  request: unknown,
  show: (response: SystemResponse) => Effect.Effect<void, never, CliIo>,
  options?: Facade.RunOptions
) =>
  Effect.gen(function* () {
    yield* heading(title)
    yield* print(intro)
    const decoded = yield* decodeRequest(request)
    const [response, ms] = yield* timed(runRequest(decoded, options))
    if (response.error === undefined) yield* show(response)
    yield* print(
      `  ${formatUsage(response.tokenUsage)}; ${seconds(ms)}` +
        (response.error === undefined ? "" : `\n  failed: ${response.error.code}: ${response.error.message}`)
    )
    return response.error === undefined
  })

