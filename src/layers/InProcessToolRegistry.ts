/**
 * The ToolRegistry layer: tools defined with a Schema for their parameters and an
 * Effect handler. What the handler needs (`R`) is taken from the context once,
 * when the layer is built, so `execute` requires nothing.
 *
 * Every way a call can go wrong becomes a ToolFailure:
 *   unknown or not whitelisted      TOOL_NOT_FOUND         never retryable
 *   `available` says no             TOOL_UNAVAILABLE       retryable if idempotent
 *   arguments do not decode         TOOL_EXECUTION_FAILED  not retryable (the model must fix them)
 *   handler fails, throws or dies   TOOL_EXECUTION_FAILED  retryable if idempotent
 *   handler exceeds its timeout     TOOL_TIMEOUT           retryable if idempotent
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { ToolFailure } from "../domain/Failure.js"
import * as Issues from "../domain/Issues.js"
import { fromSchema } from "../domain/JsonSchema.js"
import { ToolDefinition } from "../domain/Message.js"
import * as Text from "../domain/Text.js"
import * as Timeout from "../services/internal/Timeout.js"
import type { ExecuteOptions, Service, Tool, ToolOutput } from "../services/ToolRegistry.js"
import { ToolRegistry } from "../services/ToolRegistry.js"
import * as Local from "../services/internal/Local.js"

export interface Options {
  /** Timeout for tools that set none. Default 30 seconds. */
  readonly defaultTimeout?: Duration.DurationInput
}

type AnyTool<R> = Tool<any, any, R>


const encodeOutput = (value: unknown): string => {
  if (typeof value === "string") return value
  if (value === undefined) return ""
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** Builds a registry from tools whose handlers need `R`. */
export const make = <R = never>(
  tools: ReadonlyArray<AnyTool<R>>,
  options: Options = {}
): Effect.Effect<Service, never, R> =>
  Effect.gen(function* () {
    // what the handlers need; not the memo map of the layer build this runs in (a handler's own layers are its own),
    // so that the context a call runs in most often holds all of it already (services/internal/Local.provide)
    const context = Context.omit(Layer.CurrentMemoMap)(yield* Effect.context<R>()) as Context.Context<R>
    const defaultTimeout = Duration.decode(options.defaultTimeout ?? "30 seconds")
    const byName = new Map<string, AnyTool<R>>()
    for (const tool of tools) {
      if (byName.has(tool.name)) return yield* Effect.dieMessage(`ToolRegistry: duplicate tool name "${tool.name}"`)
      byName.set(tool.name, tool)
    }
    const definitionOf = new Map(
      tools.map((t) => [
        t.name,
        new ToolDefinition({ name: t.name, description: t.description, parameters: fromSchema(t.parameters) })
      ])
    )
    // each tool's argument decoder, made once
    const decoderOf = new Map(tools.map((t) => [t.name, Schema.decodeUnknown(t.parameters)]))
    const allowed = (name: string, allow?: ReadonlyArray<string>) =>
      byName.has(name) && (allow === undefined || allow.length === 0 || allow.includes(name))

    const execute = (
      call: Parameters<Service["execute"]>[0],
      opts: ExecuteOptions = {}
    ): Effect.Effect<ToolOutput, ToolFailure> => {
      const tool = byName.get(call.name)
      const fail = (code: ToolFailure["code"], message: string, retryable: boolean, cause?: unknown) =>
        new ToolFailure({
          code,
          // a name nobody registered is the caller's, of any length: quoted as an excerpt
          tool: Text.excerpt(call.name),
          toolCallId: call.id,
          retryable,
          message,
          details: { arguments: Text.bounded(call.arguments) },
          ...(cause === undefined ? {} : { cause })
        })
      if (tool === undefined || !allowed(call.name, opts.allow)) {
        const known = [...byName.keys()].filter((n) => allowed(n, opts.allow))
        return Effect.fail(
          fail(
            "TOOL_NOT_FOUND",
            `Tool "${Text.excerpt(call.name)}" does not exist${known.length > 0 ? `; available tools: ${known.join(", ")}` : ""}`,
            false
          )
        )
      }
      const idempotent = tool.idempotent === true
      const timeout = Duration.decode(opts.timeout ?? tool.timeout ?? defaultTimeout)
      const decoded = Effect.mapError(decoderOf.get(call.name)!(call.arguments), (error) =>
        fail(
          "TOOL_EXECUTION_FAILED",
          `Invalid arguments for tool "${call.name}": ${Issues.describe(error, "an object of arguments", "the arguments").join("; ")}`,
          false
        ))
      const handled = Effect.flatMap(decoded, (args) =>
        Timeout.timeoutFail(
          tool.handler(args).pipe(
            Effect.catchAllDefect((defect) =>
              Effect.fail(fail("TOOL_EXECUTION_FAILED", `Tool "${call.name}" crashed: ${Text.messageOf(defect)}`, idempotent, defect))
            ),
            Effect.mapError((error) =>
              error instanceof ToolFailure
                ? error
                : fail("TOOL_EXECUTION_FAILED", `Tool "${call.name}" failed: ${Text.messageOf(error)}`, idempotent, error)
            )
          ),
          timeout,
          () => fail("TOOL_TIMEOUT", `Tool "${call.name}" timed out after ${Duration.format(timeout)}`, idempotent)
        ))
      const run = tool.available === undefined ? handled : Effect.flatMap(tool.available, (up) =>
        up ? handled : Effect.fail(fail("TOOL_UNAVAILABLE", `Tool "${call.name}" is unavailable`, idempotent)))
      const output = Effect.map(run, (value): ToolOutput => ({ call, content: encodeOutput(value), value }))
      return Local.provide(output, context)
    }

    return {
      definitions: (allow) => [...definitionOf.values()].filter((d) => allowed(d.name, allow)),
      execute,
      has: allowed,
      idempotent: (name) => byName.get(name)?.idempotent === true
    } satisfies Service
  })

/** A ToolRegistry layer from tools; what their handlers need is required by the layer. */
export const layer = <R = never>(
  tools: ReadonlyArray<AnyTool<R>>,
  options: Options = {}
): Layer.Layer<ToolRegistry, never, R> => Layer.effect(ToolRegistry, make(tools, options))

/** An empty registry: every call is TOOL_NOT_FOUND. */
export const empty: Layer.Layer<ToolRegistry> = layer([])

