/**
 * `pagantic extract`: structured extraction. The model's answer is constrained
 * and validated by a JSON schema (`--schema`, a file or inline JSON); prints the
 * structured output, the raw content, the repairs and the usage. No tools.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import type { SystemResponse } from "../../../domain/System.js"
import { globalOptions, jsonOption, maxTokensOption, schemaOption, systemOption } from "../Flags.js"
import { decodeRequest, hints, loadSchema, messages, messageText } from "../Input.js"
import { formatUsage, print, respond } from "../Output.js"
import { toolsFor, withSystem } from "../Wiring.js"

const printStructured = (response: SystemResponse) =>
  Effect.gen(function* () {
    if (response.structuredOutput !== undefined) yield* print(JSON.stringify(response.structuredOutput, null, 2))
    yield* print(`raw: ${response.content}`)
    if (response.validationResult !== undefined && response.validationResult.repairAttempts > 0) {
      yield* print(`repairs: ${response.validationResult.repairAttempts}`)
    }
    yield* print(`usage: ${formatUsage(response.tokenUsage)}`)
  })

export const extract = Command.make(
  "extract",
  {
    ...globalOptions,
    schema: schemaOption,
    system: systemOption,
    temperature: Options.float("temperature").pipe(Options.optional),
    maxTokens: maxTokensOption,
    json: jsonOption,
    text: Args.text({ name: "text" }).pipe(Args.withDescription("the text to extract from"), Args.atLeast(1))
  },
  (args) =>
    Effect.gen(function* () {
      const text = yield* messageText(args.text)
      const schema = yield* loadSchema(args.schema)
      const request = yield* decodeRequest({
        mode: "structured",
        messages: messages(text, args.system),
        output: { schema },
        hints: hints(args)
      })
      yield* withSystem(args, toolsFor.structured, () =>
        respond(request, args.json, (response) => (response.error === undefined ? printStructured(response) : Effect.void)))
    })
).pipe(Command.withDescription("structured extraction: the model's answer, constrained and validated by a JSON schema"))
