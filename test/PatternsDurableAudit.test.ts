/**
 * ensemble_with_audit killed with a real SIGKILL at each CALL, DO and LEARN boundary and
 * mid-call, then resumed by a second process on the same SQLite state file: the
 * same KNOW as an uncrashed run, the same LEARN bodies, and no CALL dispatched
 * again once its DO was recorded (the one in flight at the kill at most twice).
 * The boundaries are in test/support/patterns-crash.ts; real processes, two at a
 * time, the file bounded.
 */
import { describe, expect, it } from "@effect/vitest"
import { boundaries } from "./support/patterns-crash.js"
import { check } from "./support/patterns-crashcheck.js"

describe("patterns survive SIGKILL", () => {
  it("ensemble_with_audit: killed at each CALL, DO and LEARN boundary and mid-call, the run ends as if never killed", async () => {
    expect(await check("ensemble_with_audit")).toBe(boundaries.ensemble_with_audit.length)
  }, 150_000)
})
