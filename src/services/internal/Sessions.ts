/**
 * Sessions kept in memory under two bounds (count and approximate bytes), the
 * least recently written dropped first: the store behind the in-memory
 * ConversationStore and SessionState.
 */

export interface InMemoryOptions {
  /**
   * Sessions kept at most; past it the least recently written is dropped, so a
   * long-running server that opens a session per request stays bounded.
   * Default 10,000.
   */
  readonly maxSessions?: number | undefined
  /**
   * Approximate bytes kept at most over all sessions (see `approximateBytes`);
   * past it the least recently written sessions are dropped. A session larger
   * than this on its own is not kept at all. Default 64 MiB.
   */
  readonly maxBytes?: number | undefined
}

/** The bounds of the in-memory ConversationStore and SessionState when no option says otherwise. */
export const inMemoryDefaults = { maxSessions: 10_000, maxBytes: 64 * 1024 * 1024 } as const

const positive = (n: number | undefined, fallback: number): number =>
  n === undefined || !(n >= 1) ? fallback : Math.floor(n)

/** A stored session: its value, approximate size, and the write that stored it. */
class Entry<A> {
  constructor(readonly value: A, readonly bytes: number, readonly write: number) {}
}

/**
 * Sessions in a Map, each with its approximate size; a write moves the session
 * to the end of the write order and drops the least recently written while
 * either bound is passed. A session over `maxBytes` on its own is removed
 * instead of stored.
 *
 * The write order is a queue of (session, write number) beside the Map, not the
 * Map's own order: the oldest entry of a Map is `keys().next()`, and V8 finds it
 * by stepping over every entry deleted since the Map's table was last rebuilt.
 * A full store drops one session per new one, so that step would grow with
 * every session ever dropped. A
 * queue entry whose session was written again since is stale and skipped; the
 * queue is rebuilt from the Map when stale entries outnumber live ones, so it
 * holds at most about twice the sessions (each write O(1), amortized).
 */
export const makeSessions = <A>(options: InMemoryOptions) => {
  const maxSessions = positive(options.maxSessions, inMemoryDefaults.maxSessions)
  const maxBytes = positive(options.maxBytes, inMemoryDefaults.maxBytes)
  const sessions = new Map<string, Entry<A>>()
  let total = 0
  let writes = 0
  // the write order: ids[i] written by write number stamps[i]; entries before `head` are gone
  let ids: Array<string> = []
  let stamps: Array<number> = []
  let head = 0
  const remove = (sessionId: string) => {
    const old = sessions.get(sessionId)
    if (old === undefined) return
    total -= old.bytes
    sessions.delete(sessionId)
  }
  /**
   * The queue rebuilt from the Map (whose order is the write order too) when stale entries outnumber live
   * ones; the entries dropped from its front let go when they outnumber the rest.
   */
  const compact = () => {
    const queued = ids.length - head
    if (queued > 2 * sessions.size + 64) {
      ids = []
      stamps = []
      head = 0
      for (const [id, entry] of sessions) {
        ids.push(id)
        stamps.push(entry.write)
      }
    } else if (head > 1024 && head > queued) {
      ids = ids.slice(head)
      stamps = stamps.slice(head)
      head = 0
    }
  }
  /** Drops the least recently written session still stored. */
  const dropOldest = () => {
    while (head < ids.length) {
      const id = ids[head]!
      const stamp = stamps[head]!
      head++
      const entry = sessions.get(id)
      if (entry !== undefined && entry.write === stamp) {
        // the entry read once (as `remove` would read it again)
        total -= entry.bytes
        sessions.delete(id)
        return
      }
    }
  }
  return {
    get: (sessionId: string): A | undefined => sessions.get(sessionId)?.value,
    bytes: (sessionId: string): number => sessions.get(sessionId)?.bytes ?? 0,
    put: (sessionId: string, value: A, bytes: number) => {
      remove(sessionId)
      if (bytes > maxBytes) return
      const write = ++writes
      sessions.set(sessionId, new Entry(value, bytes, write))
      ids.push(sessionId)
      stamps.push(write)
      total += bytes
      while (sessions.size > maxSessions || total > maxBytes) dropOldest()
      compact()
    },
    remove,
    /** How many sessions are stored. */
    size: (): number => sessions.size,
    ids: (): Array<string> => [...sessions.keys()],
    /** The write-order entries held, live, stale or dropped from the front (for tests: bounded by the sessions). */
    unsafeQueued: (): number => ids.length
  }
}
