/**
 * Layer 0: what an answer to a query must look like.
 *
 * A responder answers with a body. Keys starting with `_` are about the answer,
 * not part of it: `_confidence` (a number in [0, 1]) and `_rationale` (text). The
 * answer is the body without them, and it must match the query's answer shape:
 *
 * - core.classification.v1: `{ category }` (one of `labels` when the shape names
 *   them), optionally with the classifier's own `confidence` in [0, 1];
 * - core.summary.v1: `{ summary }`;
 * - core.text.v1: `{ text }`;
 * - core.json.v1: any JSON value the shape's inline JSON Schema accepts.
 *
 * The text of an answer (what text similarity compares) is its category, summary
 * or text; for JSON answers, their canonical JSON.
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { canonicalJson, isObject } from "./Json.js"
import * as JsonSchema from "./JsonSchema.js"
import type { AnswerShape } from "./Query.js"
import * as Text from "./Text.js"

/** The body without its `_` keys. */
export const answerOf = (body: unknown): unknown => {
  if (!isObject(body)) return body
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(body)) {
    if (key.startsWith("_")) continue
    Object.defineProperty(out, key, { value: body[key], enumerable: true, writable: true, configurable: true })
  }
  return out
}

const unit = (u: unknown): number | undefined => (typeof u === "number" && u >= 0 && u <= 1 ? u : undefined)

/** The body's own `_confidence`, when it is a number in [0, 1]. */
export const statedConfidence = (body: unknown): number | undefined => (isObject(body) ? unit(body._confidence) : undefined)

/** The body's `_rationale`, when it is text. */
export const rationaleOf = (body: unknown): string | undefined =>
  isObject(body) && typeof body._rationale === "string" ? body._rationale : undefined

/** A checker for one shape: the answer, or what is wrong with it. */
export interface Checker {
  readonly shape: AnswerShape | undefined
  readonly check: (answer: unknown) => Either.Either<unknown, string>
  /** The confidence the shape itself carries (a classifier's `confidence`), if any. */
  readonly confidence: (answer: unknown) => number | undefined
  readonly text: (answer: unknown) => string
}

const field = (name: string) => (answer: unknown): Either.Either<unknown, string> =>
  isObject(answer) && typeof answer[name] === "string"
    ? Either.right(answer)
    : Either.left(`expected an object with a string "${name}", got ${Text.excerpt(canonicalJson(answer), 60)}`)

const textOfField = (name: string) => (answer: unknown): string =>
  isObject(answer) && typeof answer[name] === "string" ? answer[name] : typeof answer === "string" ? answer : canonicalJson(answer)

/** Any answer, compared as JSON: for folds used without a query (voting). */
export const anyAnswer: Checker = {
  shape: undefined,
  check: Either.right,
  confidence: () => undefined,
  text: (answer) => (typeof answer === "string" ? answer : canonicalJson(answer))
}

/** The checker of `shape`, built once per query. */
export const checker = (shape: AnswerShape): Checker => {
  switch (shape.kind) {
    case "core.classification.v1": {
      const labels = shape.labels === undefined ? undefined : new Set(shape.labels)
      const hasCategory = field("category")
      return {
        shape,
        check: (answer) =>
          Either.flatMap(hasCategory(answer), (a) => {
            const category = (a as { readonly category: string }).category
            return labels === undefined || labels.has(category)
              ? Either.right(a)
              : Either.left(`category ${JSON.stringify(Text.excerpt(category, 60))} is none of the labels`)
          }),
        confidence: (answer) => (isObject(answer) ? unit(answer.confidence) : undefined),
        text: textOfField("category")
      }
    }
    case "core.summary.v1":
      return { shape, check: field("summary"), confidence: () => undefined, text: textOfField("summary") }
    case "core.text.v1":
      return { shape, check: field("text"), confidence: () => undefined, text: textOfField("text") }
    case "core.json.v1": {
      const decode = Schema.decodeUnknownEither(JsonSchema.toEffectSchema(shape.schema), { errors: "first" })
      return {
        shape,
        check: (answer) =>
          Either.mapBoth(decode(answer), {
            onRight: () => answer,
            onLeft: (error) =>
            ParseResult.ArrayFormatter.formatErrorSync(error)
              .slice(0, 3)
              .map((i) => `${i.path.join(".") || "the answer"}: ${Text.excerpt(i.message, 120)}`)
              .join("; ")
          }),
        confidence: () => undefined,
        text: anyAnswer.text
      }
    }
  }
}

/** The JSON Schema an engine is asked to answer in (with the optional `_confidence` and `_rationale`). */
export const jsonSchemaOf = (shape: AnswerShape): JsonSchema.JsonSchema => {
  const meta = { _confidence: JsonSchema.number("how sure, from 0 to 1"), _rationale: JsonSchema.string("why, briefly") }
  switch (shape.kind) {
    case "core.classification.v1":
      return JsonSchema.object(
        { category: shape.labels === undefined ? JsonSchema.string("the category") : JsonSchema.enumOf(shape.labels, "the category"), ...meta },
        ["category"]
      )
    case "core.summary.v1":
      return JsonSchema.object({ summary: JsonSchema.string("the summary"), ...meta }, ["summary"])
    case "core.text.v1":
      return JsonSchema.object({ text: JsonSchema.string("the answer"), ...meta }, ["text"])
    case "core.json.v1":
      return shape.schema
  }
}
