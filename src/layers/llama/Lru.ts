/**
 * A least-recently-used map, bounded by count: the engine's caches of compiled
 * grammars (./Grammars.ts) and of tokenized prompt pieces (./Tokens.ts).
 */

/** A map bounded by count: reading an entry refreshes it, adding past capacity drops the stalest. */
export class Lru<K, V> {
  private readonly entries = new Map<K, V>()
  constructor(readonly capacity: number) {}

  get size(): number {
    return this.entries.size
  }

  get(key: K): V | undefined {
    const value = this.entries.get(key)
    if (value !== undefined) {
      this.entries.delete(key)
      this.entries.set(key, value)
    }
    return value
  }

  set(key: K, value: V): void {
    this.entries.delete(key)
    this.entries.set(key, value)
    while (this.entries.size > Math.max(0, this.capacity)) this.entries.delete(this.entries.keys().next().value!)
  }
}
