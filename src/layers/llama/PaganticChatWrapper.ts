/**
 * The chat wrapper of pagantic's bundled local model (`models/pagantic-tiny.gguf`).
 *
 * A compact prompt format, so that a tiny model trained on it sees short
 * sequences and learns the function-call syntax reliably:
 *
 * ```text
 * <s><|system|>Classify the sentiment of the review.<|user|>Not bad at all.<|assistant|>{"sentiment": "positive"}<|end|>
 * <s><|system|>Tools:
 * calculator: Evaluate an arithmetic expression. {"expression": string}<|user|>What is 12 plus 7?<|assistant|><tool_call>calculator
 * {"expression": "12 + 7"}</tool_call><tool_result>19</tool_result>The answer is 19.<|end|>
 * ```
 *
 * `<s>`, `<|system|>`, `<|user|>`, `<|assistant|>` and `<|end|>` are control tokens
 * (written as special-token text); `<tool_call>`, `</tool_call>`, `<tool_result>` and
 * `</tool_result>` are user-defined tokens of the bundled vocabulary, so they are one
 * token each whether or not special tokens are parsed.
 *
 * The function-call syntax is chosen to agree with how node-llama-cpp's `LlamaChat`
 * generates a call: after the call prefix it constrains the function name with a
 * grammar that ends in a newline, then generates the parameters with the JSON-schema
 * grammar, so the rendered call is `<tool_call>NAME\n{JSON}</tool_call>`.
 *
 * Any model may be used with this wrapper, but only the bundled model was trained on it.
 */
import {
  ChatWrapper,
  jsonDumps,
  LlamaText,
  SpecialToken,
  SpecialTokensText
} from "node-llama-cpp"
import type {
  ChatHistoryItem,
  ChatModelFunctions,
  ChatWrapperGenerateContextStateOptions,
  ChatWrapperGeneratedContextState,
  ChatWrapperSettings,
  GbnfJsonSchema
} from "node-llama-cpp"

/** `general.name` written into the bundled GGUF; the engine selects this wrapper when it sees it. */
export const BUNDLED_MODEL_NAME = "pagantic-tiny"

/** Default file name of the bundled model, relative to the package's `models/` directory. */
export const BUNDLED_MODEL_FILE = "pagantic-tiny.gguf"

/** True when a GGUF `general.name` designates the bundled model. */
export const isBundledModelName = (name: string | undefined): boolean => name === BUNDLED_MODEL_NAME

/** The control tokens of the format (all present in the bundled vocabulary). */
export const PaganticSpecialTokens = {
  bos: "<s>",
  end: "<|end|>",
  system: "<|system|>",
  user: "<|user|>",
  assistant: "<|assistant|>"
} as const

/** The user-defined tokens of the function-call syntax. */
export const PaganticToolTokens = {
  callStart: "<tool_call>",
  callEnd: "</tool_call>",
  resultStart: "<tool_result>",
  resultEnd: "</tool_result>"
} as const

/** The system prompt used when a chat starts without one. */
export const PAGANTIC_DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

/** The calculator tool the bundled model was trained to call. */
export const BUNDLED_CALCULATOR_TOOL = {
  name: "calculator",
  description: "Evaluate an arithmetic expression",
  parameters: {
    type: "object",
    properties: { expression: { type: "string" } },
    required: ["expression"]
  }
} as const

/** The structured-output schema the bundled model was trained to answer for sentiment. */
export const BUNDLED_SENTIMENT_SCHEMA = {
  type: "object",
  properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
  required: ["sentiment"]
} as const

/**
 * The task analyzer's configuration the bundled model was trained on: a short
 * instruction and no format instructions (the TaskList schema constrains the
 * reply), so that its prompt is the request and the processors' names. Give it as
 * the orchestrator's `analyzer` when the bundled model analyzes; it knows the
 * processors `sentiment` and `calculator`.
 */
export const BUNDLED_ANALYZER = {
  baseInstruction: "Break the request into tasks.",
  formatInstructions: "",
  quoted: ["sentiment"]
} as const

/** A compact, JSON-like rendering of a parameter schema: `{"expression": string}`. */
export const describeSchema = (schema: Readonly<GbnfJsonSchema> | null | undefined, depth = 0): string => {
  if (schema == null || depth > 4) return "any"
  const s = schema as Record<string, unknown>
  if (Array.isArray(s["enum"])) return (s["enum"] as Array<unknown>).map((v) => JSON.stringify(v)).join("|")
  if ("const" in s) return JSON.stringify(s["const"])
  if (Array.isArray(s["oneOf"])) {
    return (s["oneOf"] as Array<GbnfJsonSchema>).map((x) => describeSchema(x, depth + 1)).join("|")
  }
  const type = s["type"]
  if (Array.isArray(type)) return type.map((t) => String(t)).join("|")
  if (type === "object") {
    const props = (s["properties"] ?? {}) as Record<string, GbnfJsonSchema>
    const required = new Set((s["required"] as Array<string> | undefined) ?? Object.keys(props))
    const fields = Object.entries(props).map(
      ([key, value]) => `${JSON.stringify(key)}${required.has(key) ? "" : "?"}: ${describeSchema(value, depth + 1)}`
    )
    return `{${fields.join(", ")}}`
  }
  if (type === "array") {
    const items = s["items"] as GbnfJsonSchema | undefined
    return `${describeSchema(items, depth + 1)}[]`
  }
  if (type === "integer") return "number"
  return typeof type === "string" ? type : "any"
}

const toolCallSettings: ChatWrapperSettings = {
  supportsSystemMessages: true,
  functions: {
    call: {
      optionalPrefixSpace: true,
      prefix: PaganticToolTokens.callStart,
      paramsPrefix: "\n",
      suffix: PaganticToolTokens.callEnd,
      emptyCallParamsPlaceholder: {}
    },
    result: {
      prefix: PaganticToolTokens.resultStart,
      suffix: PaganticToolTokens.resultEnd
    }
  },
  segments: {}
}

/** Renders a tool result: strings as they are, anything else as compact JSON. */
export const renderToolResult = (result: unknown): string =>
  result === undefined ? "void" : typeof result === "string" ? result : jsonDumps(result)

export class PaganticChatWrapper extends ChatWrapper {
  readonly wrapperName: string = "Pagantic"
  override readonly settings: ChatWrapperSettings = toolCallSettings

  override generateContextState(
    { availableFunctions, chatHistory, documentFunctionParams }: ChatWrapperGenerateContextStateOptions
  ): ChatWrapperGeneratedContextState {
    const history = this.addAvailableFunctionsSystemMessageToHistory(
      chatHistory,
      availableFunctions,
      documentFunctionParams === undefined ? {} : { documentParams: documentFunctionParams }
    )

    type Block = { readonly role: "system" | "user" | "assistant"; readonly text: LlamaText }
    const blocks: Array<Block> = []
    for (const item of history) {
      if (item.type === "system") {
        const text = LlamaText.fromJSON(item.text)
        const last = blocks.at(-1)
        if (last !== undefined && last.role === "system") {
          blocks[blocks.length - 1] = { role: "system", text: LlamaText([last.text, "\n", text]) }
        } else blocks.push({ role: "system", text })
      } else if (item.type === "user") {
        blocks.push({ role: "user", text: LlamaText(item.text) })
      } else if (item.type === "model") {
        blocks.push({ role: "assistant", text: this.generateModelResponseText(item.response) })
      }
    }
    // The context always ends with an open assistant turn.
    if (blocks.at(-1)?.role !== "assistant") blocks.push({ role: "assistant", text: LlamaText([]) })

    const marker = {
      system: PaganticSpecialTokens.system,
      user: PaganticSpecialTokens.user,
      assistant: PaganticSpecialTokens.assistant
    } as const
    const contextText = LlamaText([
      new SpecialToken("BOS"),
      ...blocks.map((block, index) =>
        LlamaText([
          new SpecialTokensText(marker[block.role]),
          block.text,
          block.role === "assistant" && index !== blocks.length - 1
            ? new SpecialTokensText(PaganticSpecialTokens.end)
            : ""
        ])
      )
    ])

    return {
      contextText,
      stopGenerationTriggers: [
        LlamaText(new SpecialToken("EOS")),
        LlamaText(new SpecialTokensText(PaganticSpecialTokens.end)),
        LlamaText(new SpecialTokensText(PaganticSpecialTokens.user)),
        LlamaText(PaganticSpecialTokens.end)
      ]
    }
  }

  override generateFunctionCallResult(_functionName: string, _functionParams: unknown, result: unknown): LlamaText {
    return LlamaText([this.settings.functions.result.prefix, renderToolResult(result), this.settings.functions.result.suffix])
  }

  override generateAvailableFunctionsSystemText(
    availableFunctions: ChatModelFunctions,
    _options: { documentParams?: boolean }
  ): LlamaText {
    const entries = Object.entries(availableFunctions)
    if (entries.length === 0) return LlamaText([])
    return LlamaText.joinValues("\n", [
      "Tools:",
      ...entries.map(([name, fn]) => {
        const description = fn.description === undefined || fn.description === "" ? "" : ` ${fn.description}.`
        return `${name}:${description} ${describeSchema(fn.params)}`
      })
    ])
  }

  override generateInitialChatHistory(
    { systemPrompt = PAGANTIC_DEFAULT_SYSTEM_PROMPT }: { systemPrompt?: string } = {}
  ): Array<ChatHistoryItem> {
    return [{ type: "system", text: LlamaText(systemPrompt).toJSON() }]
  }
}
