/**
 * The server's keys: who may call, as which principal. Each key is a principal
 * (`Principal.ts`) with a name and a role, configured in code (`Options.keys`),
 * in a keys file (`Options.keysFile`, `PAGANTIC_KEYS_FILE`), or both; `apiKey`
 * is one more, the admin named `admin`.
 *
 * A key is kept only as its SHA-256: a keys file holds hashes, never keys, and a
 * key given in code is hashed when the ring is made. A presented key is hashed
 * and compared with every hash of the ring in constant time, so neither the
 * answer nor its timing tells which principal came close.
 *
 * The keys file is JSON, written by `pagantic keys add` (0600):
 *
 *   { "keys": [ { "name": "alice", "role": "responder:did:example:alice", "sha256": "<hex>" } ] }
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import { ConfigurationFailure } from "../../domain/Failure.js"
import type { Principal, Role } from "./Principal.js"

/** One key: its principal and the key itself (`key`) or its SHA-256 in hex (`sha256`). */
export interface KeyEntry {
  /** The principal's name: unique in the ring, what owners are recorded as. */
  readonly name: string
  readonly role: Role
  /** Role `responder`: the responder id a query's tier names (a DID such as `did:example:alice`). */
  readonly responder?: string | undefined
  readonly key?: Redacted.Redacted<string> | undefined
  readonly sha256?: string | undefined
}

/** The keys a server accepts. */
export interface KeyRing {
  /** The principal a presented key belongs to, if any. */
  readonly authenticate: (presented: string) => Principal | undefined
  readonly principals: ReadonlyArray<Principal>
}

const digest = (text: string): Buffer => createHash("sha256").update(text, "utf8").digest()

/** A key's SHA-256, as a keys file holds it. */
export const hashOf = (key: string): string => digest(key).toString("hex")

/** A new random key (32 bytes, base64url): what `pagantic serve` and `pagantic keys add` hand out. */
export const generate = (): string => `pgk_${randomBytes(32).toString("base64url")}`

const NAME = /^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$/
const HEX = /^[0-9a-f]{64}$/

const invalid = (field: string, message: string) =>
  ConfigurationFailure.invalidRequest(`${field}: ${message}`, { details: { field } })

/** A role as written in configuration: `admin`, `client` or `responder:<id>`. */
export const parseRole = (text: string): Either.Either<{ readonly role: Role; readonly responder?: string }, string> => {
  if (text === "admin" || text === "client") return Either.right({ role: text })
  if (text.startsWith("responder:") && text.length > "responder:".length && text.length <= 200) {
    return Either.right({ role: "responder", responder: text.slice("responder:".length) })
  }
  return Either.left(`a role is "admin", "client" or "responder:<id>", not ${JSON.stringify(text.slice(0, 60))}`)
}

/**
 * The ring of `entries`: every name unique and well formed, a responder with its
 * id, each with a key or a 64-digit hex hash; otherwise CONFIG_INVALID_REQUEST
 * naming the entry (never quoting a key).
 */
export const make = (entries: ReadonlyArray<KeyEntry>): Either.Either<KeyRing, ConfigurationFailure> => {
  const seen = new Set<string>()
  const hashes: Array<Buffer> = []
  const principals: Array<Principal> = []
  for (const [i, entry] of entries.entries()) {
    const field = `keys[${i}]`
    if (typeof entry.name !== "string" || !NAME.test(entry.name)) {
      return Either.left(invalid(`${field}.name`, "a name is 1-64 letters, digits or ._@:- and starts with a letter or digit"))
    }
    if (seen.has(entry.name)) return Either.left(invalid(`${field}.name`, `${entry.name} is named twice`))
    seen.add(entry.name)
    if (entry.role !== "admin" && entry.role !== "client" && entry.role !== "responder") {
      return Either.left(invalid(`${field}.role`, `a role is "admin", "client" or "responder"`))
    }
    if (entry.role === "responder" && (typeof entry.responder !== "string" || entry.responder === "")) {
      return Either.left(invalid(`${field}.responder`, "a responder key names the responder id it answers for"))
    }
    if ((entry.key === undefined) === (entry.sha256 === undefined)) {
      return Either.left(invalid(field, "give either key or sha256"))
    }
    if (entry.key !== undefined) {
      const key = Redacted.value(entry.key)
      if (key === "") return Either.left(invalid(`${field}.key`, "a key is not empty"))
      hashes.push(digest(key))
    } else if (!HEX.test(entry.sha256!)) {
      return Either.left(invalid(`${field}.sha256`, "the SHA-256 of the key, 64 lowercase hex digits"))
    } else {
      hashes.push(Buffer.from(entry.sha256!, "hex"))
    }
    principals.push(entry.role === "responder"
      ? { name: entry.name, role: "responder", responder: entry.responder }
      : { name: entry.name, role: entry.role })
  }
  return Either.right({
    principals,
    authenticate: (presented) => {
      const hash = digest(presented)
      let found: Principal | undefined
      // every hash compared: the time does not depend on which one matches
      for (let i = 0; i < hashes.length; i++) {
        if (timingSafeEqual(hash, hashes[i]!) && found === undefined) found = principals[i]
      }
      return found
    }
  })
}

/** A keys file as it is written. */
export const KeysFile = Schema.Struct({
  keys: Schema.Array(Schema.Struct({ name: Schema.String, role: Schema.String, sha256: Schema.String }))
})
export type KeysFile = typeof KeysFile.Type

/** The entries of a keys file's text; a malformed file is CONFIG_INVALID_REQUEST naming the path and the field. */
export const parseFile = (text: string, path: string): Either.Either<ReadonlyArray<KeyEntry>, ConfigurationFailure> =>
  Either.flatMap(
    Either.mapLeft(
      Schema.decodeUnknownEither(Schema.parseJson(KeysFile))(text),
      (error) => invalid(path, `not a keys file ({"keys":[{"name","role","sha256"}]}): ${error.message.slice(0, 300)}`)
    ),
    (file) =>
      Either.all(file.keys.map((entry, i) =>
        Either.mapBoth(parseRole(entry.role), {
          onLeft: (message) => invalid(`${path}: keys[${i}].role`, message),
          onRight: (role): KeyEntry => ({ name: entry.name, ...role, sha256: entry.sha256 })
        })
      ))
  )

/** The entries of the keys file at `path`. */
export const load = (path: string): Effect.Effect<ReadonlyArray<KeyEntry>, ConfigurationFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(path).pipe(
      Effect.mapError((error) => invalid(path, `cannot read the keys file: ${error.message.slice(0, 200)}`))
    )
    return yield* parseFile(text, path)
  })

/**
 * Adds a principal to the keys file at `path` (made, 0600, when missing) and
 * returns its new key: the only time the key exists outside its holder's hands.
 */
export const add = (
  path: string,
  name: string,
  roleText: string
): Effect.Effect<string, ConfigurationFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    yield* Either.mapLeft(parseRole(roleText), (message) => invalid("role", message))
    const exists = yield* fs.exists(path).pipe(Effect.orElseSucceed(() => false))
    const file: KeysFile = exists ? { keys: (yield* load(path)).map(written) } : { keys: [] }
    if (file.keys.some((entry) => entry.name === name)) {
      return yield* Effect.fail(invalid("name", `${name} already has a key in ${path}`))
    }
    const key = generate()
    const next: KeysFile = { keys: [...file.keys, { name, role: roleText, sha256: hashOf(key) }] }
    // the whole ring checked before it is written: a bad name never lands in the file
    yield* make(next.keys.map((entry) => ({ name: entry.name, ...Either.getOrThrow(parseRole(entry.role)), sha256: entry.sha256 })))
    const write = fs.writeFileString(path, `${JSON.stringify(next, null, 2)}\n`, { mode: 0o600 }).pipe(
      Effect.zipRight(fs.chmod(path, 0o600)),
      Effect.mapError((error) => invalid(path, `cannot write the keys file: ${error.message.slice(0, 200)}`))
    )
    yield* write
    return key
  })

const written = (entry: KeyEntry): KeysFile["keys"][number] => ({
  name: entry.name,
  role: entry.role === "responder" ? `responder:${entry.responder}` : entry.role,
  sha256: entry.sha256 ?? ""
})
