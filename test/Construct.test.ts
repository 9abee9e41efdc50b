/**
 * domain/Construct: `unchecked(C, props)` builds the instance `new C(props, true)`
 * builds, for each class the loops build this way: same prototype, same own
 * fields in the same order, defaults filled in fresh, deeply equal, equal by
 * Equal exactly when two constructed ones are, and the same JSON.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Equal from "effect/Equal"
import * as Schema from "effect/Schema"
import * as Construct from "../src/domain/Construct.js"
import { ExecutionState } from "../src/domain/Lifecycle.js"
import * as Message from "../src/domain/Message.js"
import { CorrelationContext, SystemResponse, ToolCallRecord } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as DateTime from "effect/DateTime"
import { RunMessage, RunToolResult } from "../src/programs/run/Message.js"
import { InferenceRequest } from "../src/services/Engine.js"

const same = <C extends new (props: any, options?: any) => any>(Class: C & { readonly fields: Schema.Struct.Fields }, props: ConstructorParameters<C>[0]) => {
  const built = Construct.unchecked(Class as any, props) as InstanceType<C>
  const made = new Class(props, true) as InstanceType<C>
  expect(Object.getPrototypeOf(built)).toBe(Class.prototype)
  expect(built).toBeInstanceOf(Class)
  expect(Reflect.ownKeys(built)).toEqual(Reflect.ownKeys(made))
  expect(built).toStrictEqual(made)
  expect(Equal.equals(built, Construct.unchecked(Class as any, props))).toBe(Equal.equals(made, new Class(props, true)))
  expect(JSON.stringify(built)).toBe(JSON.stringify(made))
  return built
}

describe("Construct.unchecked", () => {
  it("builds what the constructor builds, for every class the loops build this way", () => {
    const call = new Message.ToolCall({ id: "c1", name: "add", arguments: { a: 1 } })
    same(Message.UserMessage, { role: "user", content: "hi" })
    same(Message.SystemMessage, { role: "system", content: "sys" })
    same(Message.AssistantMessage, { role: "assistant", content: "", toolCalls: [call] })
    same(Message.ToolMessage, { role: "tool", content: "2", toolCallId: "c1", name: "add", isError: false })
    same(Message.ToolResult, { callId: "c1", name: "add", content: "2", isError: false })
    const usage = same(TokenUsage.TokenUsage, {
      promptTokens: 3, reasoningTokens: 0, outputTokens: 2, contextTokens: 5, contextWindow: 8, tokensPerSecond: 1, calls: 1
    })
    expect(usage.totalTokens).toBe(5) // the prototype's getters
    same(InferenceRequest, { messages: [Message.user("hi")], maxTokens: 16 })
    same(InferenceRequest, { messages: [], tools: [], temperature: 0.5 })
    same(RunToolResult, { callId: "c1", name: "add", content: "2", isError: false, raw: 2 })
    same(RunMessage, { id: "m1", role: "user", content: "hi" })
    same(RunMessage, { id: "m2", role: "assistant", content: "", toolCalls: [call], metadata: { a: 1 } })
    same(ToolCallRecord, { id: "c1", name: "add", arguments: {}, result: "2", isError: false, durationMs: 1 })
    same(CorrelationContext, { requestId: "r", sessionId: "s" })
    same(ExecutionState, { current: "INIT", enteredAt: DateTime.unsafeMake(0), attempt: 1, totalSteps: 0 })
    same(SystemResponse, new SystemResponse({ requestId: "r", success: true, content: "x" } as any, true))
  })

  it("makes each default fresh, as the constructor does", () => {
    const a = Construct.unchecked(InferenceRequest, { messages: [] })
    const b = Construct.unchecked(InferenceRequest, { messages: [] })
    expect(a.tools).toEqual([])
    expect(a.tools).not.toBe(b.tools)
    const m = Construct.unchecked(RunMessage, { id: "m", role: "user", content: "" })
    expect([m.toolCalls, m.metadata]).toEqual([[], {}])
    // a field given, even one with a default, is kept
    const given = [new Message.ToolCall({ id: "c", name: "n", arguments: {} })]
    expect(Construct.unchecked(RunMessage, { id: "m", role: "assistant", content: "", toolCalls: given }).toolCalls).toBe(given)
  })
})
