/**
 * Progress lines (src/adapters/cli/Progress.ts): the rendering, and the plain
 * Reporter scripts use (`npm run eval`): a live line on a terminal, plain lines at
 * every tenth of the work otherwise.
 */
import { describe, expect, it } from "vitest"
import { render, Reporter } from "../src/adapters/cli/Progress.js"

const sink = (isTTY: boolean) => {
  const written: Array<string> = []
  const stream = { isTTY, write: (text: string) => void written.push(text) } as unknown as NodeJS.WriteStream
  return { written, stream }
}

describe("Progress", () => {
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
