/**
 * `pagantic chat`: one message, streamed with the tool calls and their results,
 * or without one an interactive session (one session id across turns; `/exit` or
 * the end of input leaves). The calculator is offered.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { SystemRequest, SystemResponse } from "../../../domain/System.js"
import { globalOptions, jsonOption, maxTokensOption, systemOption } from "../Flags.js"
import { decodeRequest, hints, messages, messageText } from "../Input.js"
import { CliIo } from "../Io.js"
import { failOnError, formatUsage, print, respond, streamProgress } from "../Output.js"
import { runRequest, toolsFor, withSystem } from "../Wiring.js"

const chatTurn = (request: SystemRequest) =>
  Effect.gen(function* () {
    const io = yield* CliIo
    const response = yield* runRequest(request, streamProgress(io))
    if (response.error === undefined) {
      yield* print(`\n(${response.stopReason ?? "finish"}; ${formatUsage(response.tokenUsage)})`)
    } else {
      yield* print()
    }
    return response
  })

/** The wire form every turn of a session shares; `messages` open the first turn (the system prompt). */
interface SessionBase {
  readonly mode: "chat"
  readonly hints: ReturnType<typeof hints>
  readonly messages: ReadonlyArray<unknown>
}

const repl = (base: SessionBase) =>
  Effect.gen(function* () {
    const io = yield* CliIo
    yield* print("pagantic chat: one session across turns; /exit or end of input to leave")
    let sessionId: string | undefined = undefined
    for (;;) {
      const line = yield* io.readLine("> ")
      if (Option.isNone(line)) return yield* print()
      if (line.value.trim() === "/exit") return
      const text = line.value.trim()
      if (text.length === 0) continue
      const request: SystemRequest = yield* decodeRequest({
        ...base,
        ...(sessionId === undefined ? {} : { sessionId }),
        messages: [...(sessionId === undefined ? base.messages : []), { role: "user", content: text }]
      })
      const response: SystemResponse = yield* chatTurn(request)
      if (response.error !== undefined) {
        yield* io.error(`${response.error.code}: ${response.error.message}`)
      }
      sessionId = response.sessionId ?? sessionId
    }
  })

export const chat = Command.make(
  "chat",
  {
    ...globalOptions,
    system: systemOption,
    temperature: Options.float("temperature").pipe(Options.withDescription("sampling temperature (0..2)"), Options.optional),
    maxTokens: maxTokensOption,
    json: jsonOption,
    prompt: Args.text({ name: "prompt" }).pipe(Args.withDescription("one message; without it, an interactive session"), Args.repeated)
  },
  (args) =>
    Effect.gen(function* () {
      const base = { mode: "chat", hints: hints(args) } as const
      if (args.prompt.length === 0) {
        const system = Option.map(args.system, (content) => [{ role: "system", content }])
        // check the flags before loading the model
        yield* decodeRequest({ ...base, messages: [{ role: "user", content: "check" }] })
        return yield* withSystem(args, toolsFor.chat, () => repl({ ...base, messages: Option.getOrElse(system, () => []) }))
      }
      const text = yield* messageText(args.prompt)
      const request = yield* decodeRequest({ ...base, messages: messages(text, args.system) })
      yield* withSystem(args, toolsFor.chat, () =>
        args.json ? respond(request, true, () => Effect.void) : Effect.flatMap(chatTurn(request), failOnError))
    })
).pipe(Command.withDescription("chat with the model and its tools (one message, or interactive without one)"))
