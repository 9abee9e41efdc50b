/**
 * Who may call `pagantic serve`: a key from the first start, as a notebook server
 * hands out its token. With no key configured (no PAGANTIC_API_KEY, no keys file)
 * the server makes an admin key once, keeps it beside its state (`<state>.key`
 * for a SQLite file, else `$PAGANTIC_HOME/serve.key`, PAGANTIC_HOME defaulting to
 * `~/.pagantic`), mode 0600, and reuses it at every later start, so the page's URL
 * it logs (`http://127.0.0.1:PORT/#key=KEY`) stays good. Running open is a choice
 * made out loud: `--no-auth`, refused beyond loopback.
 *
 * More principals come from a keys file: `--keys FILE`, else PAGANTIC_KEYS_FILE,
 * else `$PAGANTIC_HOME/keys.json` when it exists (`pagantic keys add` writes it).
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as os from "node:os"
import * as path from "node:path"
import * as Http from "../Http.js"
import { defaults } from "../http/Config.js"
import { isLoopback } from "../http/Edge.js"
import { CliFailure } from "./CliFailure.js"

/** What `serve` is told about keys on its command line. */
export interface AuthFlags {
  readonly noAuth: boolean
  readonly keys: Option.Option<string>
}

/** Where the store is, as far as the key's place goes. */
export type StoreLocation = { readonly _tag: "Sqlite"; readonly file: string } | { readonly _tag: "Postgres" } | undefined

/** What `serve` listens with, and the admin key to announce (the one it made or kept). */
export interface Resolved {
  readonly options: Http.Options
  readonly announce?: { readonly key: string; readonly file: string } | undefined
}

/** `$PAGANTIC_HOME`, else `~/.pagantic`. */
export const homeOf = (env: NodeJS.ProcessEnv = process.env): string => {
  const home = env.PAGANTIC_HOME
  return home !== undefined && home.trim() !== "" ? home : path.join(os.homedir(), ".pagantic")
}

/** Where a server on `store` keeps the key it made. */
export const keyFileFor = (store: StoreLocation, home: string): string =>
  store?._tag === "Sqlite" ? `${store.file}.key` : path.join(home, "serve.key")

/** The keys file `pagantic keys add` writes and `serve` reads when none is named: `$PAGANTIC_HOME/keys.json`. */
export const defaultKeysFile = (home: string): string => path.join(home, "keys.json")

const refuse = (message: string) => new CliFailure({ message })

const KEY = /^pgk_[A-Za-z0-9_-]{43}$/

/**
 * The admin key kept at `file`: read when it is there (it must be 0600 and hold
 * one key), made when it is not (exclusively: of two servers starting at once,
 * the second reads what the first wrote).
 */
export const keptKey = (file: string): Effect.Effect<string, CliFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const read = Effect.gen(function* () {
      const info = yield* fs.stat(file)
      if ((Number(info.mode) & 0o077) !== 0) {
        return yield* Effect.fail(refuse(`the key file ${file} can be read by others (mode ${(Number(info.mode) & 0o777).toString(8)}): chmod 600 it, or remove it for a new key`))
      }
      const key = (yield* fs.readFileString(file)).trim()
      return KEY.test(key) ? key : yield* Effect.fail(refuse(`the key file ${file} does not hold a key: remove it and start again for a new one`))
    })
    const exists = yield* fs.exists(file).pipe(Effect.orElseSucceed(() => false))
    if (exists) return yield* read.pipe(Effect.catchTag("SystemError", "BadArgument", (e) => Effect.fail(refuse(`cannot read the key file ${file}: ${e.message}`))))
    const key = Http.Keys.generate()
    yield* fs.makeDirectory(path.dirname(file), { recursive: true, mode: 0o700 }).pipe(Effect.ignore)
    return yield* fs.writeFileString(file, `${key}\n`, { flag: "wx", mode: 0o600 }).pipe(
      Effect.as(key),
      // another server made it first: use that one
      Effect.catchIf((e) => e._tag === "SystemError" && e.reason === "AlreadyExists", () => read),
      Effect.catchTag("SystemError", "BadArgument", (e) => Effect.fail(refuse(`cannot write the key file ${file}: ${e.message}`)))
    )
  })

const hasKeys = (options: Http.Options): boolean =>
  options.apiKey !== undefined || options.keysFile !== undefined || (options.keys !== undefined && options.keys.length > 0)

/**
 * The options `serve` listens with: `configured` (flags and environment) with
 * the keys file found and, when no key is configured and `--no-auth` is not
 * given, the kept admin key.
 */
export const resolve = (
  configured: Http.Options,
  flags: AuthFlags,
  store: StoreLocation,
  home: string = homeOf()
): Effect.Effect<Resolved, CliFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const host = configured.host ?? defaults.host
    const named = Option.getOrUndefined(flags.keys) ?? configured.keysFile
    const fallback = defaultKeysFile(home)
    const keysFile = named ?? ((yield* fs.exists(fallback).pipe(Effect.orElseSucceed(() => false))) ? fallback : undefined)
    const options: Http.Options = { ...configured, keysFile }
    if (flags.noAuth) {
      if (hasKeys(options)) {
        return yield* Effect.fail(refuse(`--no-auth and a key at once: unset PAGANTIC_API_KEY and the keys file (${keysFile ?? "none"}), or drop --no-auth`))
      }
      if (!isLoopback(host)) {
        return yield* Effect.fail(refuse(`--no-auth is refused on ${host}: anyone who reaches it could run the model and its tools. Listen on 127.0.0.1, or leave auth on`))
      }
      return { options }
    }
    if (options.apiKey !== undefined) return { options }
    // a keys file alone may hold no admin: the server still gets its own, so someone can see everything
    const file = keyFileFor(store, home)
    const key = yield* keptKey(file)
    return { options: { ...options, apiKey: Redacted.make(key) }, announce: { key, file } }
  })

/** The page's URL with the key in its fragment (never sent to the server; the page reads it once). */
export const pageUrl = (address: string, key: string): string => `${address}/#key=${encodeURIComponent(key)}`
