/**
 * Input: the command line's words and files decoded into what a command sends.
 * Schema and plan files are read with a size cap and checked (UTF-8, JSON, not
 * nested too deeply, a schema or a plan); a request is decoded into a
 * SystemRequest before any model is loaded, and a refused field is named by the
 * flag it came from. Every refusal is a CliFailure.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type * as PlatformError from "@effect/platform/Error"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Issues from "../../domain/Issues.js"
import { JsonSchema } from "../../domain/JsonSchema.js"
import { ExecutionPlan } from "../../domain/Plan.js"
import { SystemRequest } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import { CliFailure, fail } from "./CliFailure.js"

// ---------------------------------------------------------------------------
// JSON files
// ---------------------------------------------------------------------------

/** The largest schema or plan file read (as the HTTP adapter's default body limit). */
const MAX_FILE_BYTES = 1024 * 1024

/** The deepest nesting of objects and arrays accepted in a schema or plan. */
const MAX_JSON_DEPTH = 64

/** Nesting depth of a parsed JSON value, counted without recursion (stops past `limit`). */
const depthOf = (value: unknown, limit: number): number => {
  let deepest = 0
  const stack: Array<readonly [unknown, number]> = [[value, 0]]
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [v, depth] = next
    if (typeof v !== "object" || v === null) continue
    deepest = Math.max(deepest, depth + 1)
    if (deepest > limit) return deepest
    for (const child of Object.values(v)) stack.push([child, depth + 1])
  }
  return deepest
}

const parseJson = (text: string, what: string) =>
  Effect.gen(function* () {
    if (text.trim().length === 0) return yield* fail(`${what} is empty`)
    const json = yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) => new CliFailure({ message: `${what} is not JSON: ${Text.messageOf(e)}` })
    })
    if (depthOf(json, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) {
      return yield* fail(`${what} is nested too deeply (more than ${MAX_JSON_DEPTH} levels of objects and arrays)`)
    }
    return json
  })

const unreadable = (what: string, file: string) => (e: PlatformError.PlatformError) =>
  new CliFailure({
    message: e._tag === "SystemError" && e.reason === "NotFound"
      ? `cannot read ${what} ${file}: no such file`
      : e._tag === "SystemError" && e.reason === "PermissionDenied"
      ? `cannot read ${what} ${file}: permission denied`
      : `cannot read ${what} ${file}: ${e.message}`
  })

/**
 * A schema or plan file as UTF-8 text: at most MAX_FILE_BYTES are read, so a huge
 * file or a device (/dev/zero) is refused without being read whole; a pipe works.
 */
export const readText = (file: string, what: string, maxBytes: number = MAX_FILE_BYTES) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    if (file.length === 0) return yield* fail(`${what} is an empty path`)
    const info = yield* fs.stat(file).pipe(Effect.mapError(unreadable(what, file)))
    if (info.type === "Directory") return yield* fail(`cannot read ${what} ${file}: it is a directory`)
    const chunks = yield* fs.stream(file, { bytesToRead: maxBytes + 1 }).pipe(
      Stream.runCollect,
      Effect.mapError(unreadable(what, file))
    )
    const bytes = Buffer.concat([...chunks])
    if (bytes.length > maxBytes) return yield* fail(`${what} ${file} is larger than ${maxBytes / 1024 / 1024} MiB`)
    return yield* Effect.try({
      try: () => new TextDecoder("utf-8", { fatal: true }).decode(bytes),
      catch: () => new CliFailure({ message: `${what} ${file} is not UTF-8 text` })
    })
  })

/** A JSON file of at most `maxBytes`, read and parsed with the same checks as a schema or plan file. */
export const readJsonFile = (file: string, what: string, maxBytes: number) =>
  Effect.flatMap(readText(file, what, maxBytes), (text) => parseJson(text, `${what} ${file}`))

/** `--schema`: inline JSON (starting with `{` or `[`) or the path of a JSON file. */
export const loadSchema = (value: string) =>
  Effect.gen(function* () {
    const inline = /^\s*[{[]/.test(value)
    const what = inline ? "the inline schema" : `the schema file ${value}`
    const json = yield* parseJson(inline ? value : yield* readText(value, "the schema file"), what)
    const decoded = yield* Schema.decodeUnknown(JsonSchema)(json).pipe(
      Effect.mapError((e) => new CliFailure({ message: `${what} is not a schema: ${Issues.describe(e, "a JSON schema object", "the schema").join("; ")}` }))
    )
    if (decoded.type === undefined && decoded.properties === undefined && decoded.enum === undefined && decoded.anyOf === undefined) {
      return yield* fail(`${what} is not a schema: it needs a "type", "properties", "enum" or "anyOf"`)
    }
    return json
  })

/** A plan file: its JSON as written (the request's wire form) and the plan it decodes to. */
export const loadPlan = (file: string) =>
  Effect.gen(function* () {
    const wire = yield* parseJson(yield* readText(file, "the plan file"), `the plan file ${file}`)
    const plan = yield* Schema.decodeUnknown(ExecutionPlan)(wire).pipe(
      Effect.mapError((e) =>
        new CliFailure({ message: `the plan file ${file} is not a plan: ${Issues.describe(e, "a plan object", "the plan").join("; ")}` })
      )
    )
    return { wire, plan } as const
  })

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/** The flag each request field comes from, so that a refused value is named as the user typed it. */
const flagOfField: Record<string, string> = {
  "hints.temperature": "--temperature",
  "hints.maxTokens": "--max-tokens",
  "redundancy.n": "-n",
  "redundancy.quorum": "--quorum",
  "redundancy.voting": "--voting"
}

const nameFlag = (line: string): string => {
  const field = Object.keys(flagOfField).find((f) => line.startsWith(`${f}: `) || line.startsWith(`${f}.`))
  // an absent flag is no alternative the user can act on
  return field === undefined ? line : `${flagOfField[field]}${line.slice(field.length)}`.replace(" | undefined, got", ", got")
}

/** Decodes a wire-form request, so that bad input fails before a model is loaded. */
export const decodeRequest = (wire: unknown) =>
  Schema.decodeUnknown(SystemRequest)(wire).pipe(
    Effect.mapError((e) =>
      new CliFailure({ message: `invalid request: ${Issues.describe(e, "a SystemRequest object").map(nameFlag).join("; ")}` })
    )
  )

/** The message of a command: its words joined; none, or only spaces, is refused. */
export const messageText = (words: ReadonlyArray<string>) => {
  const text = words.join(" ")
  return text.trim().length === 0 ? fail("the message is empty") : Effect.succeed(text)
}

/** A user message, after the system prompt if there is one (wire form). */
export const messages = (text: string, system: Option.Option<string>) => [
  ...Option.match(system, { onNone: () => [], onSome: (content) => [{ role: "system", content }] }),
  { role: "user", content: text }
]

/** The sampling hints given on the command line (wire form; the ones not given are left out). */
export const hints = (fields: { readonly temperature?: Option.Option<number> | undefined; readonly maxTokens?: Option.Option<number> | undefined }) => ({
  ...(fields.temperature !== undefined && Option.isSome(fields.temperature) ? { temperature: fields.temperature.value } : {}),
  ...(fields.maxTokens !== undefined && Option.isSome(fields.maxTokens) ? { maxTokens: fields.maxTokens.value } : {})
})
