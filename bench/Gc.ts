/**
 * A CPU profile of calls, taken with V8's sampling profiler (node:inspector:
 * module loading and warm-up are not in it), and the share of its busy samples
 * in V8's `(garbage collector)` node: the GC share of the calls' CPU time. Used
 * by bench/profile.ts and by the hot path's GC rows.
 */
import * as Effect from "effect/Effect"
import * as inspector from "node:inspector/promises"

export interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly children?: ReadonlyArray<number>
}
export interface Profile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

/** The profile of `n` calls after 300 warm-up calls, and the wall time per call (ms). */
export const profiled = (call: Effect.Effect<void, unknown>, n: number): Effect.Effect<{ readonly profile: Profile; readonly msPerCall: number }, unknown> =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const session = new inspector.Session()
      session.connect()
      return session
    }),
    (session) =>
      Effect.gen(function*() {
        yield* Effect.repeatN(call, 299)
        yield* Effect.promise(() => session.post("Profiler.enable").then(() => session.post("Profiler.start")))
        const started = performance.now()
        yield* Effect.repeatN(call, n - 1)
        const msPerCall = (performance.now() - started) / n
        const { profile } = yield* Effect.promise(() => session.post("Profiler.stop"))
        return { profile: profile as unknown as Profile, msPerCall }
      }),
    (session) => Effect.sync(() => session.disconnect())
  )

/** Busy time (ms, idle samples left out), the GC share of it (0..1), and self time by `function file:line`. */
export const summarize = (profile: Profile) => {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const self = new Map<string, number>()
  let busy = 0
  let idle = 0
  let gc = 0
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0
    const { functionName, lineNumber, url } = byId.get(id)!.callFrame
    if (functionName === "(idle)") {
      idle += dt
      return
    }
    busy += dt
    if (functionName === "(garbage collector)") gc += dt
    const key = `${functionName || "(anonymous)"} ${url.replace(/^.*node_modules\//, "").replace(/^.*\/work\/main\//, "")}:${lineNumber + 1}`
    self.set(key, (self.get(key) ?? 0) + dt)
  })
  return { busyMs: busy / 1000, idleMs: idle / 1000, gcShare: busy === 0 ? 0 : gc / busy, self }
}
