/**
 * `pagantic plan`: runs a plan of typed steps (tool, infer, ...) from a JSON
 * file and prints each step's output, or "not completed" for the steps a failure
 * left undone. The calculator is offered.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { ExecutionPlan } from "../../../domain/Plan.js"
import type { SystemResponse } from "../../../domain/System.js"
import { globalOptions, jsonOption } from "../Flags.js"
import { decodeRequest, loadPlan } from "../Input.js"
import { formatUsage, json, print, respond } from "../Output.js"
import { toolsFor, withSystemTracked } from "../Wiring.js"

const outputText = (output: unknown): string =>
  typeof output === "object" && output !== null && "content" in output && typeof output.content === "string"
    ? output.content
    : json(output)

/** Each step's output by name: the structured output, or on failure the partial output (the completed steps, as JSON). */
const stepOutputs = (response: SystemResponse): Record<string, unknown> => {
  if (response.structuredOutput !== undefined) return response.structuredOutput as Record<string, unknown>
  const partial = Either.getOrElse(Either.try(() => JSON.parse(response.content) as unknown), () => undefined)
  return typeof partial === "object" && partial !== null ? (partial as Record<string, unknown>) : {}
}

/** Each step of `plan` on its own line, with its output or "not completed". */
export const printPlan = (plan: ExecutionPlan, response: SystemResponse) =>
  Effect.gen(function* () {
    const outputs = stepOutputs(response)
    for (const step of plan.steps) {
      yield* print(
        step.name in outputs
          ? `  ${step.name} (${step.type}): ${outputText(outputs[step.name])}`
          : `  ${step.name} (${step.type}): not completed`
      )
    }
  })

export const plan = Command.make(
  "plan",
  {
    ...globalOptions,
    json: jsonOption,
    file: Args.text({ name: "plan.json" }).pipe(Args.withDescription("a JSON file with { steps: [...] }"))
  },
  (args) =>
    Effect.gen(function* () {
      const { plan, wire } = yield* loadPlan(args.file)
      const request = yield* decodeRequest({ mode: "plan", messages: [], plan: wire })
      yield* withSystemTracked(args, "plan", toolsFor.plan, () =>
        respond(request, args.json, (response) =>
          Effect.zipRight(printPlan(plan, response), print(`usage: ${formatUsage(response.tokenUsage)}`))))
    })
).pipe(Command.withDescription("run a plan of typed steps (tool, infer, ...) from a JSON file"))
