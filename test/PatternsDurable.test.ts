/**
 * verify killed with a real SIGKILL at each CALL, DO and LEARN
 * boundary and mid-call, then resumed by a second process on the same SQLite
 * state file: the same KNOW as an uncrashed run, the same LEARN bodies, and no
 * responder asked again once its DO was recorded (the one in flight at the kill
 * at most twice in all). Real processes: the cases run two at a time and the
 * file is bounded.
 */
import { describe, expect, it } from "@effect/vitest"
import { boundaries } from "./support/patterns-crash.js"
import { check } from "./support/patterns-crashcheck.js"

describe("patterns survive SIGKILL", () => {
  it("verify: killed at each CALL, DO and LEARN boundary and mid-call, the run ends as if never killed", async () => {
    expect(await check("verify")).toBe(boundaries.verify.length)
  }, 150_000)
})
