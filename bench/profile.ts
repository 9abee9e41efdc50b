/**
 * A CPU profile of AgentLoop turns, and what it says: run
 *
 *   npx tsx bench/profile.ts [calls] [out.cpuprofile] [agent|telemetry|structured|redundant|plan|facade]
 *   (or base:<row> for that row's plain-Effect baseline)
 *   npx tsx bench/profile.ts --summary out.cpuprofile
 *
 * The first runs 300 warm-up calls, then profiles `calls` calls (default 2,000;
 * a call is an AgentLoop turn unless another row of bench/hotpath.bench.ts is named)
 * with V8's sampling profiler (node:inspector, so module loading and warm-up are
 * not in the profile) and writes it; the second prints the profile's self time
 * by function and by file, and the share of busy samples in V8's
 * `(garbage collector)` node: the GC share of the CPU time.
 */
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as inspector from "node:inspector/promises"
import { baseCalls, ourCalls } from "./hotpath.bench.js"

interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly children?: ReadonlyArray<number>
}
interface Profile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

const summary = (file: string) => {
  const profile = JSON.parse(fs.readFileSync(file, "utf8")) as Profile
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const self = new Map<string, number>()
  let total = 0
  let idle = 0
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0
    const node = byId.get(id)!
    const { functionName, lineNumber, url } = node.callFrame
    if (functionName === "(idle)") {
      idle += dt
      return
    }
    total += dt
    const key = `${functionName || "(anonymous)"} ${url.replace(/^.*node_modules\//, "").replace(/^.*\/work\/main\//, "")}:${lineNumber + 1}`
    self.set(key, (self.get(key) ?? 0) + dt)
  })
  const gc = [...self.entries()].filter(([k]) => k.startsWith("(garbage collector)")).reduce((a, [, v]) => a + v, 0)
  console.log(`busy ${(total / 1000).toFixed(0)} ms (idle ${(idle / 1000).toFixed(0)} ms); GC ${((100 * gc) / total).toFixed(1)}% of busy samples`)
  const byFile = new Map<string, number>()
  for (const [k, v] of self) {
    const f = k.split(" ").at(-1)!.replace(/:\d+$/, "")
    byFile.set(f, (byFile.get(f) ?? 0) + v)
  }
  console.log("self time by function:")
  for (const [k, v] of [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    console.log(`  ${((100 * v) / total).toFixed(1).padStart(5)}%  ${k}`)
  }
  console.log("self time by file:")
  for (const [k, v] of [...byFile.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15)) {
    console.log(`  ${((100 * v) / total).toFixed(1).padStart(5)}%  ${k}`)
  }
}

if (process.argv[2] === "--summary") {
  summary(process.argv[3]!)
} else {
  const turns = Number(process.argv[2] ?? 2_000)
  const out = process.argv[3] ?? "agentloop.cpuprofile"
  // "base:agent" profiles the row's plain-Effect baseline instead
  const named = process.argv[4] ?? "agent"
  const base = named.startsWith("base:")
  const which = base ? named.slice("base:".length) : named
  const session = new inspector.Session()
  session.connect()
  const program = Effect.scoped(Effect.flatMap((base ? baseCalls : ourCalls)[which]!, (call) => profiled(call, turns)))
  const profiled = (call: Effect.Effect<void, unknown>, n: number) =>
    Effect.gen(function* () {
      yield* Effect.repeatN(call, 299)
      yield* Effect.promise(() => session.post("Profiler.enable").then(() => session.post("Profiler.start")))
      const started = performance.now()
      yield* Effect.repeatN(call, n - 1)
      const ms = (performance.now() - started) / n
      const { profile } = yield* Effect.promise(() => session.post("Profiler.stop"))
      fs.writeFileSync(out, JSON.stringify(profile))
      return ms
    })
  Effect.runPromise(program).then((ms) => console.log(`${turns} calls (${named}), ${(ms * 1000).toFixed(0)} us wall per call; profile in ${out}`))
}
