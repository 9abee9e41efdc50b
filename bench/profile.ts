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
import { type Profile, profiled, summarize } from "./Gc.js"
import { baseCalls, ourCalls } from "./hotpath.bench.js"

const summary = (file: string) => {
  const profile = JSON.parse(fs.readFileSync(file, "utf8")) as Profile
  const { busyMs, gcShare, idleMs, self } = summarize(profile)
  const total = busyMs * 1000
  console.log(`busy ${busyMs.toFixed(0)} ms (idle ${idleMs.toFixed(0)} ms); GC ${(100 * gcShare).toFixed(1)}% of busy samples`)
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
  const program = Effect.scoped(
    Effect.flatMap((base ? baseCalls : ourCalls)[which]!, (call) =>
      Effect.map(profiled(call, turns), ({ msPerCall, profile }) => {
        fs.writeFileSync(out, JSON.stringify(profile))
        return msPerCall
      }))
  )
  Effect.runPromise(program).then((ms) => console.log(`${turns} calls (${named}), ${(ms * 1000).toFixed(0)} us wall per call; profile in ${out}`))
}
