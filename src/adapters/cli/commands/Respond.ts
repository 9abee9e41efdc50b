/**
 * `pagantic respond RUN SLOT --secret S (--submit JSON | --accept --eta N |
 * --decline REASON)`: answers a human slot of a durable run. The secret is the
 * one the run handed out with the slot; a wrong one is refused and records
 * nothing. A submitted answer must match the slot's answer shape (else it is
 * refused and the slot stays open); an accept moves the deadline to at least
 * now + eta; a decline closes the slot with its reason. After a submit or a
 * decline the command waits until the run ends or waits for another answer, and
 * prints it: on a SQLite file the run goes on in this process (which holds the
 * file); on Postgres in whichever runner holds its shard (this one, or a server).
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Text from "../../../domain/Text.js"
import { DeclineReason } from "../../../services/Durable.js"
import { terminalStatuses } from "../../../services/Runs.js"
import { CliFailure, fail } from "../CliFailure.js"
import { globalOptions, integerIn, textFlag } from "../Flags.js"
import { print } from "../Output.js"
import { runsFailure, stateOption, withRuns } from "../RunsState.js"
import { settingsOf } from "../Wiring.js"
import { printRun, runIdArg } from "./Runs.js"

/** The three responses, as the flags give them: exactly one. */
type Response =
  | { readonly kind: "submit"; readonly answer: unknown }
  | { readonly kind: "accept"; readonly etaSeconds: number }
  | { readonly kind: "decline"; readonly reason: DeclineReason }

const responseOf = (args: {
  readonly submit: Option.Option<string>
  readonly accept: boolean
  readonly eta: Option.Option<number>
  readonly decline: Option.Option<DeclineReason>
}): Effect.Effect<Response, CliFailure> => {
  const given = [Option.isSome(args.submit), args.accept, Option.isSome(args.decline)].filter(Boolean).length
  if (given !== 1) return fail("give exactly one of --submit JSON, --accept --eta SECONDS, --decline REASON")
  if (Option.isSome(args.submit)) {
    const text = args.submit.value
    return Effect.try({
      try: () => ({ kind: "submit" as const, answer: JSON.parse(text) as unknown }),
      catch: (e) => new CliFailure({ message: `--submit is not JSON: ${Text.excerpt(Text.messageOf(e), 120)}` })
    })
  }
  if (args.accept) {
    return Option.match(args.eta, {
      onNone: () => fail("--accept needs --eta SECONDS (when you expect to answer)"),
      onSome: (etaSeconds) => Effect.succeed({ kind: "accept" as const, etaSeconds })
    })
  }
  return Effect.succeed({ kind: "decline" as const, reason: Option.getOrThrow(args.decline) })
}

export const respond = Command.make(
  "respond",
  {
    ...globalOptions,
    state: stateOption,
    secret: textFlag("secret").pipe(Options.withDescription("the slot's secret, as the run handed it out")),
    submit: textFlag("submit").pipe(
      Options.withPseudoName("json"),
      Options.withDescription("the answer, as JSON matching the slot's answer shape"),
      Options.optional
    ),
    accept: Options.boolean("accept").pipe(Options.withDescription("take the slot; answer within --eta seconds")),
    eta: integerIn("eta", 0, 366 * 24 * 3600).pipe(Options.withDescription("seconds until you answer (with --accept)"), Options.optional),
    decline: Options.choice("decline", DeclineReason.literals).pipe(Options.withDescription("decline the slot, with a reason"), Options.optional),
    id: runIdArg,
    slot: Args.text({ name: "slot" }).pipe(Args.withDescription("the slot's key (pagantic runs show names the one a run waits on)"))
  },
  (args) =>
    Effect.gen(function* () {
      const response = yield* responseOf(args)
      const settings = yield* settingsOf(args)
      yield* withRuns(args.state, settings, ({ runs }) =>
        Effect.gen(function* () {
          const outcome = yield* (
            response.kind === "submit"
              ? runs.respond(args.id, args.slot, args.secret, response.answer)
              : response.kind === "accept"
              ? runs.accept(args.id, args.slot, args.secret, response.etaSeconds)
              : runs.decline(args.id, args.slot, args.secret, response.reason)
          ).pipe(Effect.mapError(runsFailure))
          yield* print(`${response.kind}: ${outcome} (run ${args.id}, slot ${args.slot})`)
          if (response.kind === "accept") return
          // the run goes on (here on a SQLite file, in its shard's runner on Postgres) until it ends or waits for another answer
          const info = yield* Effect.zipLeft(runs.poll(args.id), Effect.sleep("50 millis")).pipe(
            Effect.repeat({
              until: (info) => terminalStatuses.has(info.status) || (info.status === "suspended" && info.waitingOn !== args.slot)
            }),
            Effect.mapError(runsFailure)
          )
          yield* printRun(info)
        }))
    })
).pipe(Command.withDescription("answer a human slot of a durable run: submit, accept or decline"))
