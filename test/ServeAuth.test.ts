/**
 * `pagantic serve`'s key from the first start (ServeAuth): made once, 0600, kept
 * beside the state and reused; refused when others can read it; `--no-auth`
 * only on loopback and never beside a key; the default keys file found.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ServeAuth from "../src/adapters/cli/ServeAuth.js"
import * as Keys from "../src/adapters/http/Keys.js"

const home = () => fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-home-"))
const on = { noAuth: false, keys: Option.none() }
const resolve = (...args: Parameters<typeof ServeAuth.resolve>) =>
  ServeAuth.resolve(...args).pipe(Effect.provide(NodeFileSystem.layer))
const message = (effect: Effect.Effect<unknown, { readonly message: string }>) =>
  Effect.map(Effect.flip(effect), (e) => e.message)

describe("serve's key from the first start", () => {
  it.effect("no key configured: an admin key is made at $PAGANTIC_HOME/serve.key, 0600, announced, and the same at the next start", () =>
    Effect.gen(function* () {
      const dir = home()
      const first = yield* resolve({}, on, undefined, dir)
      const file = path.join(dir, "serve.key")
      expect(first.announce?.file).toBe(file)
      const key = first.announce!.key
      expect(key).toMatch(/^pgk_[A-Za-z0-9_-]{43}$/)
      expect(fs.statSync(file).mode & 0o777).toBe(0o600)
      expect(fs.readFileSync(file, "utf8").trim()).toBe(key)
      expect(Redacted.value(first.options.apiKey!)).toBe(key)
      // the ring the server makes of it knows the key as the admin
      const ring = Either.getOrThrow(Keys.make([{ name: "admin", role: "admin", key: first.options.apiKey! }]))
      expect(ring.authenticate(key)?.role).toBe("admin")
      const second = yield* resolve({}, on, undefined, dir)
      expect(second.announce?.key).toBe(key)
    }))

  it.effect("with a SQLite state file the key is kept beside it (<state>.key); on Postgres in $PAGANTIC_HOME", () =>
    Effect.gen(function* () {
      const dir = home()
      const state = path.join(dir, "runs.db")
      expect((yield* resolve({}, on, { _tag: "Sqlite", file: state }, dir)).announce?.file).toBe(`${state}.key`)
      expect((yield* resolve({}, on, { _tag: "Postgres" }, dir)).announce?.file).toBe(path.join(dir, "serve.key"))
    }))

  it.effect("a configured key wins: nothing is made or announced", () =>
    Effect.gen(function* () {
      const dir = home()
      const resolved = yield* resolve({ apiKey: Redacted.make("given") }, on, undefined, dir)
      expect(resolved.announce).toBeUndefined()
      expect(Redacted.value(resolved.options.apiKey!)).toBe("given")
      expect(fs.existsSync(path.join(dir, "serve.key"))).toBe(false)
    }))

  it.effect("a key file others can read, or one that holds no key, is refused with what to do", () =>
    Effect.gen(function* () {
      const dir = home()
      const file = path.join(dir, "serve.key")
      fs.writeFileSync(file, `${Keys.generate()}\n`, { mode: 0o644 })
      fs.chmodSync(file, 0o644)
      expect(yield* message(resolve({}, on, undefined, dir))).toBe(
        `the key file ${file} can be read by others (mode 644): chmod 600 it, or remove it for a new key`
      )
      fs.writeFileSync(file, "hello\n", { mode: 0o600 })
      fs.chmodSync(file, 0o600)
      expect(yield* message(resolve({}, on, undefined, dir))).toBe(
        `the key file ${file} does not hold a key: remove it and start again for a new one`
      )
    }))

  it.effect("--no-auth: open on loopback, refused beyond it and beside a key", () =>
    Effect.gen(function* () {
      const dir = home()
      const open = yield* resolve({ host: "127.0.0.1" }, { noAuth: true, keys: Option.none() }, undefined, dir)
      expect(open.options.apiKey).toBeUndefined()
      expect(open.announce).toBeUndefined()
      expect(fs.existsSync(path.join(dir, "serve.key"))).toBe(false)
      expect(yield* message(resolve({ host: "0.0.0.0" }, { noAuth: true, keys: Option.none() }, undefined, dir))).toBe(
        "--no-auth is refused on 0.0.0.0: anyone who reaches it could run the model and its tools. Listen on 127.0.0.1, or leave auth on"
      )
      expect(yield* message(resolve({ apiKey: Redacted.make("k") }, { noAuth: true, keys: Option.none() }, undefined, dir))).toContain(
        "--no-auth and a key at once"
      )
    }))

  it.effect("the keys file: --keys wins over PAGANTIC_KEYS_FILE, which wins over $PAGANTIC_HOME/keys.json (used only when it exists)", () =>
    Effect.gen(function* () {
      const dir = home()
      expect((yield* resolve({}, on, undefined, dir)).options.keysFile).toBeUndefined()
      const fallback = path.join(dir, "keys.json")
      yield* Keys.add(fallback, "alice", "client").pipe(Effect.provide(NodeFileSystem.layer))
      expect((yield* resolve({}, on, undefined, dir)).options.keysFile).toBe(fallback)
      expect((yield* resolve({ keysFile: "/elsewhere/keys.json" }, on, undefined, dir)).options.keysFile).toBe("/elsewhere/keys.json")
      expect((yield* resolve({ keysFile: "/elsewhere/keys.json" }, { noAuth: false, keys: Option.some("/flag/keys.json") }, undefined, dir)).options.keysFile)
        .toBe("/flag/keys.json")
    }))

  it("the page's link puts the key in the fragment, which no request carries", () => {
    expect(ServeAuth.pageUrl("http://127.0.0.1:8080", "pgk_a-b_c")).toBe("http://127.0.0.1:8080/#key=pgk_a-b_c")
  })
})
