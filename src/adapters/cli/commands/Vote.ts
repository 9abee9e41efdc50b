/**
 * `pagantic vote`: redundant mode. N replicas answer at a temperature under a
 * JSON schema and vote over their valid answers; prints the winner, the
 * confidence and every replica's answer. While the replicas run, a progress line
 * on standard error counts their answers.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import type { SystemResponse } from "../../../domain/System.js"
import { fail } from "../CliFailure.js"
import * as Progress from "../Progress.js"
import { globalOptions, jsonOption, maxTokensOption, schemaOption, systemOption } from "../Flags.js"
import { decodeRequest, hints, loadSchema, messages, messageText } from "../Input.js"
import { confidence, formatUsage, json, print, respond } from "../Output.js"
import { toolsFor, withSystem } from "../Wiring.js"

const printVote = (response: SystemResponse, candidates: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    yield* print(`winner: ${json(response.structuredOutput)}`)
    yield* print(`confidence: ${confidence(response)} (${response.confidenceSource ?? "voting"})`)
    yield* print(`candidates (${candidates.length}):`)
    yield* Effect.forEach(candidates, (c, i) => print(`  ${i + 1}. ${c}`))
    yield* print(`usage: ${formatUsage(response.tokenUsage)}`)
  })

export const vote = Command.make(
  "vote",
  {
    ...globalOptions,
    schema: schemaOption,
    n: Options.integer("n").pipe(Options.withDescription("replicas"), Options.withDefault(5)),
    quorum: Options.integer("quorum").pipe(Options.withDescription("valid answers needed (default: a majority of n)"), Options.optional),
    voting: Options.choice("voting", ["majority", "unanimity"]).pipe(Options.withDefault("majority" as const)),
    temperature: Options.float("temperature").pipe(Options.withDescription("sampling temperature"), Options.withDefault(0.8)),
    system: systemOption,
    maxTokens: maxTokensOption,
    json: jsonOption,
    text: Args.text({ name: "text" }).pipe(Args.atLeast(1))
  },
  (args) =>
    Effect.gen(function* () {
      const text = yield* messageText(args.text)
      if (Option.isSome(args.quorum) && args.quorum.value > args.n) {
        return yield* fail(`--quorum ${args.quorum.value} is more than the ${args.n} replicas (-n) that vote`)
      }
      const schema = yield* loadSchema(args.schema)
      const request = yield* decodeRequest({
        mode: "redundant",
        messages: messages(text, args.system),
        output: { schema },
        hints: hints({ temperature: Option.some(args.temperature), maxTokens: args.maxTokens }),
        redundancy: {
          n: args.n,
          voting: args.voting,
          ...(Option.isSome(args.quorum) ? { quorum: args.quorum.value } : {})
        }
      })
      yield* withSystem(args, toolsFor.structured, (outputs) =>
        // each answer the engine finishes advances the progress line (standard error)
        Progress.track({ label: "vote", total: args.n, unit: "answers" }, (tracker) =>
          Effect.gen(function* () {
            const watching = yield* Effect.fork(
              Stream.runForEach(Stream.drop(outputs.changes, 1), (all) => tracker.set(all.length))
            )
            return yield* respond(request, args.json, (response) =>
              response.error === undefined ? Effect.flatMap(Ref.get(outputs), (c) => printVote(response, c)) : Effect.void
            ).pipe(Effect.ensuring(Fiber.interrupt(watching)))
          })))
    })
).pipe(Command.withDescription("redundant mode: N replicas at a temperature, a vote over their valid answers"))
