/**
 * Layer 4: tools.
 *
 * A tool is a name, a description, a Schema for its parameters and an Effect
 * handler. The registry is what the loops see: the definitions to offer the model
 * (narrowed by a per-request whitelist) and `execute`, which decodes the model's
 * arguments, runs the handler under its timeout and turns every way a call can go
 * wrong into a ToolFailure. A model that calls an unknown tool, passes arguments
 * that do not decode, or a handler that throws or hangs is a value, never a defect.
 *
 * In a durable run a handler finds the call's idempotency key in `IdempotencyKey`
 * (the same on every replay of the call, different in every run), to hand to
 * services that deduplicate by key.
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Schema from "effect/Schema"
import { ToolFailure } from "../domain/Failure.js"
import * as Text from "../domain/Text.js"
import type { ToolCall, ToolDefinition } from "../domain/Message.js"

/** A tool with typed parameters. `R` is what the handler needs; the registry layer provides it. */
export interface Tool<A = any, I = any, R = never> {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Schema<A, I>
  readonly handler: (args: A) => Effect.Effect<unknown, unknown, R>
  /** Per-tool deadline; the registry's default applies when absent. */
  readonly timeout?: Duration.DurationInput | undefined
  /** An idempotent tool may be retried when it fails; others never are. */
  readonly idempotent?: boolean | undefined
  /** Whether the tool can run now (an external dependency may be down). */
  readonly available?: Effect.Effect<boolean, never, R> | undefined
}

/** Defines a tool. The handler's result becomes the tool message: strings as is, anything else as JSON. */
export const make = <A, I, R = never>(tool: Tool<A, I, R>): Tool<A, I, R> => tool

/** The outcome of a successful tool call. */
export interface ToolOutput {
  readonly call: ToolCall
  /** What is fed back to the model. */
  readonly content: string
  /** The handler's own value, before encoding. */
  readonly value: unknown
}

export interface ExecuteOptions {
  /** Only these tool names may run; absent or empty means all. */
  readonly allow?: ReadonlyArray<string> | undefined
  /** Overrides the tool's own timeout. */
  readonly timeout?: Duration.DurationInput | undefined
}

export interface Service {
  /** Definitions offered to the model, narrowed by `allow` (absent or empty: all). */
  readonly definitions: (allow?: ReadonlyArray<string>) => ReadonlyArray<ToolDefinition>
  /** Decodes the arguments, runs the handler under its timeout, maps every failure to a ToolFailure. */
  readonly execute: (call: ToolCall, options?: ExecuteOptions) => Effect.Effect<ToolOutput, ToolFailure>
  /** Whether the tool exists (and passes the whitelist). */
  readonly has: (name: string, allow?: ReadonlyArray<string>) => boolean
  /**
   * Whether the tool is declared idempotent (may run again with the same
   * arguments). Absent, or false for a tool that is not: durable runs run such
   * a tool at most once.
   */
  readonly idempotent?: ((name: string) => boolean) | undefined
}

/**
 * The idempotency key of the tool call being executed: set by durable runs (a
 * hash of the run id and the call's step key), none elsewhere. A handler reads
 * it with `yield* IdempotencyKey`.
 */
export class IdempotencyKey extends Context.Reference<IdempotencyKey>()("pagantic/ToolRegistry/IdempotencyKey", {
  defaultValue: (): Option.Option<string> => Option.none()
}) {}

/** The tool registry. */
export class ToolRegistry extends Context.Tag("pagantic/ToolRegistry")<ToolRegistry, Service>() {}

/**
 * The registry as a request may see it: only `names` exist (absent or empty: all).
 * Every way into the registry is narrowed (definitions, `has`, `execute`), so a
 * per-request whitelist holds for every loop and every plan step handler,
 * including handlers written by users.
 */
export const restrict = (registry: Service, names: ReadonlyArray<string> | undefined): Service => {
  if (names === undefined || names.length === 0) return registry
  const permitted = (name: string, allow: ReadonlyArray<string> | undefined) =>
    names.includes(name) && (allow === undefined || allow.length === 0 || allow.includes(name))
  return {
    definitions: (allow) => registry.definitions(names).filter((d) => permitted(d.name, allow)),
    has: (name, allow) => permitted(name, allow) && registry.has(name),
    idempotent: (name) => registry.idempotent?.(name) === true,
    execute: (call, options = {}) =>
      permitted(call.name, options.allow)
        ? registry.execute(call, options)
        : Effect.fail(
          ToolFailure.notFound(
            call.name,
            `Tool "${Text.excerpt(call.name)}" is not allowed for this request (allowed: ${names.join(", ")})`,
            { toolCallId: call.id }
          )
        )
  }
}
