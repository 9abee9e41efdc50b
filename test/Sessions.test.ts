/**
 * The in-memory sessions behind the ConversationStore and SessionState: the
 * least recently written dropped first under both bounds, checked against a
 * plain Map kept in write order (the obvious implementation, whose `keys().next()`
 * is O(deleted entries) in V8: services/internal/Sessions keeps a queue instead).
 */
import { describe, expect, it } from "vitest"
import { makeSessions } from "../src/services/internal/Sessions.js"
import { collect } from "./support/Gc.js"

/** The reference: a Map in write order, the oldest dropped first. */
const reference = (maxSessions: number, maxBytes: number) => {
  const sessions = new Map<string, { value: number; bytes: number }>()
  let total = 0
  const remove = (id: string) => {
    const old = sessions.get(id)
    if (old === undefined) return
    total -= old.bytes
    sessions.delete(id)
  }
  return {
    put: (id: string, value: number, bytes: number) => {
      remove(id)
      if (bytes > maxBytes) return
      sessions.set(id, { value, bytes })
      total += bytes
      while (sessions.size > maxSessions || total > maxBytes) remove(sessions.keys().next().value!)
    },
    remove,
    get: (id: string) => sessions.get(id)?.value,
    ids: () => [...sessions.keys()]
  }
}

/** A small seeded generator (mulberry32), so a failure names the case that failed. */
const prng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

describe("in-memory sessions", () => {
  it("match a Map kept in write order, over writes, rewrites, removes and both bounds", () => {
    for (const [seed, maxSessions, maxBytes, idSpace, ops] of [
      [1, 5, 1_000_000, 12, 5_000],
      // many rewrites of few sessions: stale queue entries pile up and the queue is rebuilt
      [2, 50, 1_000_000, 60, 20_000],
      // new sessions only: the front of the queue is let go again and again
      [3, 100, 1_000_000, 1_000_000_000, 20_000],
      // the bytes bound decides, and sessions too large to keep at all
      [4, 1_000, 500, 300, 10_000]
    ] as const) {
      const random = prng(seed)
      const ours = makeSessions<number>({ maxSessions, maxBytes })
      const theirs = reference(maxSessions, maxBytes)
      for (let op = 0; op < ops; op++) {
        const id = `s${Math.floor(random() * idSpace)}`
        if (random() < 0.1) {
          ours.remove(id)
          theirs.remove(id)
        } else {
          const bytes = 1 + Math.floor(random() * 120)
          ours.put(id, op, bytes)
          theirs.put(id, op, bytes)
        }
        expect(ours.get(id), `seed ${seed}, op ${op}`).toBe(theirs.get(id))
        if (op % 97 === 0) expect(ours.ids(), `seed ${seed}, op ${op}`).toEqual(theirs.ids())
      }
      expect(ours.ids()).toEqual(theirs.ids())
      for (const id of theirs.ids()) expect(ours.get(id)).toBe(theirs.get(id))
    }
  })

  it("drop the least recently written first: a session written again moves behind the others", () => {
    const sessions = makeSessions<string>({ maxSessions: 3 })
    sessions.put("a", "1", 1)
    sessions.put("b", "1", 1)
    sessions.put("c", "1", 1)
    sessions.put("a", "2", 1)
    sessions.put("d", "1", 1)
    expect(sessions.ids()).toEqual(["c", "a", "d"])
    expect(sessions.get("a")).toBe("2")
    expect(sessions.get("b")).toBeUndefined()
  })

  it("hold a write order bounded by the sessions, whether sessions are new or written again", () => {
    const fresh = makeSessions<number>({ maxSessions: 100 })
    const rewritten = makeSessions<number>({ maxSessions: 100 })
    for (let i = 0; i < 100_000; i++) {
      fresh.put(`new${i}`, i, 1)
      rewritten.put(`s${i % 10}`, i, 1)
      expect(fresh.unsafeQueued()).toBeLessThanOrEqual(2 * 1_025 + 1)
      expect(rewritten.unsafeQueued()).toBeLessThanOrEqual(2 * 10 + 64 + 1)
    }
    expect(fresh.ids()).toHaveLength(100)
    expect(rewritten.ids()).toHaveLength(10)
  })

  it("let go of a session's value once it is written again or removed, while its place in the write order is still queued", async () => {
    const sessions = makeSessions<{ readonly history: Array<number> }>({ maxSessions: 100 })
    const watched = ((): Array<WeakRef<object>> => {
      const first = { history: new Array(1024).fill(1) }
      const second = { history: new Array(1024).fill(2) }
      sessions.put("a", first, 1)
      sessions.put("b", second, 1)
      // a written again (its first entry stale in the queue), b removed
      sessions.put("a", { history: [] }, 1)
      sessions.remove("b")
      return [new WeakRef(first), new WeakRef(second)]
    })()
    // the stale entries are still queued: nothing has compacted the queue yet
    expect(sessions.unsafeQueued()).toBe(3)
    await collect()
    expect(watched.map((ref) => ref.deref())).toEqual([undefined, undefined])
    expect(sessions.get("a")).toEqual({ history: [] })
    expect(sessions.ids()).toEqual(["a"])
  })
})
