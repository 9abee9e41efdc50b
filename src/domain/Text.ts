/**
 * Short excerpts of input that may be large or hostile.
 *
 * An error message that quotes what a caller sent quotes at most an excerpt: a
 * 900 KB tool name or a 200 KB string in a plan must not come back multiplied in
 * the error, nor stay in a log. `bounded` applies the same rule to a whole value
 * (an error's details), iteratively bounded in depth, keys and items.
 */

/** Longest excerpt quoted by default, in characters. */
export const defaultExcerptLength = 80

/** `text` itself when short, else its start with the total length: `"abc…" (12,345 chars)`. */
export const excerpt = (text: string, max: number = defaultExcerptLength): string =>
  text.length <= max ? text : `${text.slice(0, max)}… (${text.length.toLocaleString("en-US")} chars)`

export interface Bounds {
  /** Longest string kept (longer ones become an excerpt). Default 200. */
  readonly maxString?: number
  /** Deepest nesting kept (deeper values become "…"). Default 6. */
  readonly maxDepth?: number
  /** Most keys of an object or items of an array kept. Default 32. */
  readonly maxItems?: number
}

/**
 * A copy of `value` safe to send back or log: strings cut to excerpts, nesting,
 * keys and items bounded. Never recursion deeper than `maxDepth`, never a cycle.
 */
export const bounded = (value: unknown, bounds: Bounds = {}): unknown => {
  const maxString = bounds.maxString ?? 200
  const maxDepth = bounds.maxDepth ?? 6
  const maxItems = bounds.maxItems ?? 32
  const seen = new Set<object>()
  const go = (v: unknown, depth: number): unknown => {
    if (typeof v === "string") return excerpt(v, maxString)
    if (typeof v !== "object" || v === null) return typeof v === "bigint" || typeof v === "function" ? String(v) : v
    if (depth >= maxDepth || seen.has(v)) return "…"
    seen.add(v)
    try {
      if (Array.isArray(v)) {
        const items = v.slice(0, maxItems).map((item) => go(item, depth + 1))
        return v.length > maxItems ? [...items, `… (${v.length - maxItems} more)`] : items
      }
      const keys = Object.keys(v)
      const out: Record<string, unknown> = {}
      for (const key of keys.slice(0, maxItems)) {
        // defineProperty: a key "__proto__" stays a plain key
        Object.defineProperty(out, excerpt(key, maxString), {
          value: go((v as Record<string, unknown>)[key], depth + 1),
          enumerable: true,
          writable: true,
          configurable: true
        })
      }
      if (keys.length > maxItems) out["…"] = `${keys.length - maxItems} more keys`
      return out
    } finally {
      seen.delete(v)
    }
  }
  return go(value, 0)
}

/**
 * What went wrong, in one line of text: a string as is, an Error's (or an
 * error-like object's) message, anything else as JSON (or String when it is not
 * JSON-able).
 */
export const messageOf = (error: unknown): string => {
  if (typeof error === "string") return error
  if (error instanceof Error) return error.message
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
    return error.message
  }
  try {
    return JSON.stringify(error) ?? String(error)
  } catch {
    return String(error)
  }
}
