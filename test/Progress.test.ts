/**
 * Progress lines (src/adapters/cli/Progress.ts): the rendering, and the plain
 * Reporter scripts use (`npm run eval`): a live line on a terminal, plain lines at
 * every tenth of the work otherwise.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { CliIo } from "../src/adapters/cli/Io.js"
import { render, Reporter, track } from "../src/adapters/cli/Progress.js"

/** Runs `track` on an Io that records its standard error lines and, on a "terminal", its status line. */
const tracked = (tty: boolean, every: number | undefined, steps: number) =>
  Effect.gen(function* () {
    const errors: Array<string> = []
    const status: Array<string | undefined> = []
    yield* track({ label: "task", unit: "inferences", every }, (tracker) =>
      Effect.forEach(Array.from({ length: steps }, (_, i) => i + 1), (n) => tracker.set(n), { discard: true })
    ).pipe(
      Effect.provideService(CliIo, {
        write: () => Effect.void,
        error: (line) => Effect.sync(() => void errors.push(line)),
        readLine: () => Effect.succeed(Option.none()),
        colors: false,
        ...(tty ? { status: (line: string | undefined) => Effect.sync(() => void status.push(line)) } : {})
      })
    )
    return { errors, status }
  })

const sink = (isTTY: boolean) => {
  const written: Array<string> = []
  const stream = { isTTY, write: (text: string) => void written.push(text) } as unknown as NodeJS.WriteStream
  return { written, stream }
}

describe("Progress", () => {
  it.effect("track off a terminal prints a plain line at each multiple of `every`; on a terminal it redraws each step and clears", () =>
    Effect.gen(function* () {
      const plain = yield* tracked(false, 10, 25)
      expect(plain.errors).toEqual(["task 10 inferences 0.0 s", "task 20 inferences 0.0 s"])
      const each = yield* tracked(false, undefined, 3)
      expect(each.errors).toEqual(["task 1 inferences 0.0 s", "task 2 inferences 0.0 s", "task 3 inferences 0.0 s"])
      const live = yield* tracked(true, 10, 25)
      expect(live.errors).toEqual([])
      expect(live.status.filter((line) => line !== undefined)).toContain("task 25 inferences 0.0 s")
      expect(live.status.filter((line) => line !== undefined).length).toBeGreaterThanOrEqual(25)
      expect(live.status.at(-1)).toBeUndefined()
    }))

  it("renders a bar with counts and elapsed time, or counts alone without a total", () => {
    expect(render({ label: "vote", done: 2, total: 5, unit: "answers", elapsedMs: 1234 })).toBe(
      "vote [########------------] 2/5 answers 1.2 s"
    )
    expect(render({ label: "vote", done: 7, total: 5, unit: "answers", elapsedMs: 0 })).toBe(
      "vote [####################] 7/5 answers 0.0 s"
    )
    expect(render({ label: "task", done: 7, unit: "inferences", elapsedMs: 3400 })).toBe("task 7 inferences 3.4 s")
  })

  it("a Reporter off a terminal prints a plain line every tenth of the work and at the end", () => {
    const { stream, written } = sink(false)
    const reporter = new Reporter("eval", 25, "reviews", stream)
    for (let i = 0; i < 25; i++) reporter.advance()
    reporter.end()
    expect(written.map((line) => line.replace(/ [\d.]+ s\n$/, ""))).toEqual(
      [3, 6, 9, 12, 15, 18, 21, 24, 25].map((n) =>
        render({ label: "eval", done: n, total: 25, unit: "reviews", elapsedMs: 0 }).replace(/ [\d.]+ s$/, "")
      )
    )
    expect(written.every((line) => line.endsWith("\n") && !line.includes("\r"))).toBe(true)
  })

  it("a Reporter on a terminal redraws one line in place and clears it at the end", () => {
    const { stream, written } = sink(true)
    const reporter = new Reporter("eval", 2, "reviews", stream)
    reporter.advance()
    reporter.advance()
    reporter.end()
    expect(written.length).toBe(3)
    expect(written.slice(0, 2).every((line) => line.startsWith("\r\x1b[2Keval [") && !line.endsWith("\n"))).toBe(true)
    expect(written[2]).toBe("\r\x1b[2K")
  })
})
