/**
 * Layer 0: canonical JSON. Two values that differ only in key order (or
 * whitespace, once parsed) have one canonical text: what voting compares and
 * what tool-argument hashes are computed over.
 */

/** The value with every object's keys in sorted order, recursively. */
export const sortKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(sortKeys)
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {}
    for (const key of Object.keys(value).sort()) out[key] = sortKeys((value as Record<string, unknown>)[key])
    return out
  }
  return value
}

/** Compact JSON with sorted keys. */
export const canonicalJson = (value: unknown): string => JSON.stringify(sortKeys(value)) ?? ""
