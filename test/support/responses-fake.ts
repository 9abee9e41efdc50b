/**
 * A fake of OpenAI's Responses API (`POST /v1/responses`) on loopback, for tests of
 * `@effect/ai-openai`, whose OpenAiLanguageModel speaks that API. Each request
 * takes the next scripted answer: a response (text and/or function calls), the same
 * as an SSE stream when the request asks to stream, or an HTTP error.
 */
import type * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Loopback from "./loopback.js"

export type Answer =
  | { readonly _tag: "Output"; readonly text?: string; readonly calls?: ReadonlyArray<{ readonly name: string; readonly arguments: string }>; readonly incomplete?: boolean }
  | { readonly _tag: "Error"; readonly status: number; readonly body: string }

export const text = (value: string): Answer => ({ _tag: "Output", text: value })
export const calls = (...list: ReadonlyArray<{ readonly name: string; readonly arguments: string }>): Answer => ({
  _tag: "Output",
  calls: list
})
export const error = (status: number, body: string): Answer => ({ _tag: "Error", status, body })

const usage = { input_tokens: 11, output_tokens: 7, total_tokens: 18, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } }

const outputItems = (answer: Extract<Answer, { _tag: "Output" }>, n: number) => [
  ...(answer.text === undefined
    ? []
    : [{
      type: "message",
      id: `msg_${n}`,
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: answer.text, annotations: [] }]
    }]),
  ...(answer.calls ?? []).map((call, i) => ({
    type: "function_call",
    id: `fc_${n}_${i}`,
    call_id: `call_${n}_${i}`,
    name: call.name,
    arguments: call.arguments,
    status: "completed"
  }))
]

const response = (answer: Extract<Answer, { _tag: "Output" }>, n: number, output: ReadonlyArray<unknown>) => ({
  id: `resp_${n}`,
  object: "response",
  status: answer.incomplete === true ? "incomplete" : "completed",
  created_at: 1_700_000_000,
  error: null,
  incomplete_details: answer.incomplete === true ? { reason: "max_output_tokens" } : null,
  output,
  instructions: null,
  model: "fake-model",
  tools: [],
  tool_choice: "auto",
  parallel_tool_calls: true,
  usage,
  metadata: null,
  temperature: null,
  top_p: null
})

const sse = (events: ReadonlyArray<Record<string, unknown>>): string =>
  events.map((event, i) => `event: ${String(event.type)}\ndata: ${JSON.stringify({ ...event, sequence_number: i })}\n\n`).join("")

const streamOf = (answer: Extract<Answer, { _tag: "Output" }>, n: number): string => {
  const items = outputItems(answer, n)
  const events: Array<Record<string, unknown>> = [{ type: "response.created", response: response(answer, n, []) }]
  items.forEach((item, index) => {
    if (item.type === "message") {
      events.push({ type: "response.output_item.added", output_index: index, item: { ...item, status: "in_progress", content: [] } })
      const words = (answer.text ?? "").split(/(?<= )/)
      for (const delta of words) {
        events.push({ type: "response.output_text.delta", item_id: item.id, output_index: index, content_index: 0, delta, logprobs: [] })
      }
      events.push({ type: "response.output_item.done", output_index: index, item })
    } else {
      events.push({ type: "response.output_item.added", output_index: index, item: { ...item, status: "in_progress", arguments: "" } })
      events.push({ type: "response.function_call_arguments.done", item_id: item.id, output_index: index, arguments: (item as { arguments: string }).arguments })
      events.push({ type: "response.output_item.done", output_index: index, item })
    }
  })
  events.push({ type: answer.incomplete === true ? "response.incomplete" : "response.completed", response: response(answer, n, items) })
  return sse(events)
}

/** Starts the fake; answers beyond the script are a 500. */
export const make = (script: ReadonlyArray<Answer>): Effect.Effect<Loopback.Loopback, never, Scope.Scope> =>
  Loopback.make((request, res, n) => {
    const answer = script[n - 1] ?? error(500, JSON.stringify({ error: { message: "script exhausted" } }))
    if (answer._tag === "Error") {
      res.writeHead(answer.status, { "content-type": "application/json" })
      res.end(answer.body)
      return
    }
    const streamed = typeof request.json === "object" && request.json !== null && (request.json as { stream?: unknown }).stream === true
    if (streamed) {
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.end(streamOf(answer, n))
      return
    }
    res.writeHead(200, { "content-type": "application/json" })
    res.end(JSON.stringify(response(answer, n, outputItems(answer, n))))
  }, { lifetime: 60_000 })
