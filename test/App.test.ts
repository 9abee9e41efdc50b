/** App (pagantic serve --app): loading an application module, and the tools and responders a server gets from it. */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as App from "../src/adapters/App.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { ResponderRegistry } from "../src/services/ResponderRegistry.js"
import * as ToolRegistry from "../src/services/ToolRegistry.js"

const fixture = path.join(import.meta.dirname, "fixtures", "app.ts")
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-app-"))
const moduleWith = (name: string, source: string) => {
  const file = path.join(dir, name)
  fs.writeFileSync(file, source)
  return file
}

describe("App", () => {
  it.effect("loads a module's default App: its tools beside the calculator, its responders beside the served engine", () =>
    Effect.gen(function* () {
      const app = yield* App.load(fixture)
      expect(App.toolsOf(app).map((t) => t.name)).toEqual(["calculator", "stock"])
      expect(app.definitions?.map((d) => d.name)).toEqual(["restock"])
      const ids = yield* Effect.flatMap(ResponderRegistry, (r) => r.responders).pipe(
        Effect.provide(App.responders(app).pipe(Layer.provide(ScriptedEngine.layer([]))))
      )
      expect(ids.map((r) => r.id)).toEqual(["model", "reviewer"])
    }))

  it("a tool of the calculator's name replaces it", () => {
    const own = ToolRegistry.make({ name: "calculator", description: "mine", parameters: Schema.Struct({}), handler: () => Effect.succeed(1) })
    expect(App.toolsOf(App.make({ tools: [own] }))).toEqual([own])
    expect(App.toolsOf(App.none).map((t) => t.name)).toEqual(["calculator"])
  })

  it.effect("a module without an App, with an unknown part or a part not an array, or that throws: CONFIG_INVALID_REQUEST naming --app", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [string, string, string]> = [
        ["none.mjs", "export const x = 1", "exports no App"],
        ["part.mjs", "export default { tool: [] }", `unknown part "tool"`],
        ["array.mjs", "export default { responders: {} }", "responders is not an array"],
        ["throws.mjs", "throw new Error('boom at load')", "cannot load it: boom at load"]
      ]
      for (const [name, source, message] of cases) {
        const failure = yield* Effect.flip(App.load(moduleWith(name, source)))
        expect(failure.code).toBe("CONFIG_INVALID_REQUEST")
        expect(failure.message).toContain("--app ")
        expect(failure.message).toContain(message)
        expect(failure.details["field"]).toBe("--app")
      }
    }))

  it.effect("a responder the registry refuses (an id taken by the served engine) fails the server's start", () =>
    Effect.gen(function* () {
      const app = App.make({ responders: [{ id: "model", kind: "actor", did: "did:example:x" }] })
      const failure = yield* Effect.flip(
        Effect.flatMap(ResponderRegistry, (r) => r.responders).pipe(Effect.provide(App.responders(app).pipe(Layer.provide(ScriptedEngine.layer([])))))
      )
      expect(failure.message).toContain("already registered")
    }))
})
