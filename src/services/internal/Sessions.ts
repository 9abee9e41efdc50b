/**
 * Sessions kept in memory under two bounds (count and approximate bytes), the
 * least recently written dropped first: the store behind the in-memory
 * ConversationStore and SessionState.
 */
import { kept } from "./Kept.js"

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

/**
 * Sessions in a Map ordered by last write, each with its approximate size; a
 * write moves the session to the end and drops the oldest while either bound is
 * passed. A session over `maxBytes` on its own is removed instead of stored.
 */
export const makeSessions = <A>(options: InMemoryOptions) => {
  const maxSessions = positive(options.maxSessions, inMemoryDefaults.maxSessions)
  const maxBytes = positive(options.maxBytes, inMemoryDefaults.maxBytes)
  const sessions = new Map<string, { readonly value: A; readonly bytes: number }>()
  let total = 0
  const remove = (sessionId: string) => {
    const old = sessions.get(sessionId)
    if (old === undefined) return
    total -= old.bytes
    sessions.delete(sessionId)
  }
  return kept({
    get: (sessionId: string): A | undefined => sessions.get(sessionId)?.value,
    bytes: (sessionId: string): number => sessions.get(sessionId)?.bytes ?? 0,
    put: (sessionId: string, value: A, bytes: number) => {
      remove(sessionId)
      if (bytes > maxBytes) return
      sessions.set(sessionId, kept({ value, bytes }))
      total += bytes
      while (sessions.size > maxSessions || total > maxBytes) remove(sessions.keys().next().value!)
    },
    remove,
    ids: (): Array<string> => [...sessions.keys()]
  })
}
