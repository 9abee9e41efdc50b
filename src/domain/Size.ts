/**
 * Approximate sizes of values, for bounds on what memory keeps (sessions, state):
 * cheap, bounded work, no serialization.
 */

/** Values visited at most when sizing one value; the rest is counted from their containers' lengths. */
const SIZE_NODES = 4_096
/** What a number, a boolean, a slot of an array or object, or a message's fixed fields count for. */
export const SLOT_BYTES = 8

/**
 * The approximate size of a value: one byte per character of its strings (and
 * object keys), 8 bytes per other value and per slot. Bounded work: at most
 * 4,096 values are visited; the slots of containers not visited count 8 bytes
 * each (what lies inside them is not seen), Maps and Sets count their sizes,
 * binary buffers their byte lengths. No serialization, so cycles are harmless.
 */
export const approximateBytes = (value: unknown): number => {
  let bytes = 0
  let visits = SIZE_NODES
  const pending: Array<unknown> = [value]
  while (pending.length > 0) {
    const v = pending.pop()
    if (typeof v === "string") {
      bytes += v.length
      continue
    }
    bytes += SLOT_BYTES
    if (typeof v !== "object" || v === null) continue
    if (v instanceof Map || v instanceof Set) {
      bytes += v.size * SLOT_BYTES
      continue
    }
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) {
      bytes += v.byteLength
      continue
    }
    const entries = Array.isArray(v) ? v : Object.keys(v)
    const walked = Math.min(entries.length, Math.max(0, visits))
    visits -= walked
    bytes += (entries.length - walked) * SLOT_BYTES
    for (let i = 0; i < walked; i++) {
      if (Array.isArray(v)) pending.push(v[i])
      else {
        const key = entries[i] as string
        bytes += key.length
        pending.push((v as Record<string, unknown>)[key])
      }
    }
  }
  return bytes
}
