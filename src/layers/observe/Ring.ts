/**
 * The bounded store under the in-memory event log and latency samples: a
 * fixed-capacity FIFO whose oldest item is overwritten when it is full.
 */

/** A fixed-capacity FIFO: O(1) push and shift, the oldest overwritten when full. */
export class Ring<A> {
  private readonly items: Array<A | undefined> = []
  private head = 0
  size = 0
  constructor(readonly capacity: number) {}

  /** Appends `item`; returns the item that fell out when the ring was full. */
  push(item: A): A | undefined {
    const evicted = this.size === this.capacity ? this.shift() : undefined
    // Until the first wrap, head + size is the array's length, so this appends.
    this.items[(this.head + this.size) % this.capacity] = item
    this.size++
    return evicted
  }

  shift(): A | undefined {
    if (this.size === 0) return undefined
    const item = this.items[this.head]
    this.items[this.head] = undefined
    this.head = (this.head + 1) % this.capacity
    this.size--
    return item
  }

  toArray(): Array<A> {
    const out = new Array<A>(this.size)
    for (let i = 0; i < this.size; i++) out[i] = this.items[(this.head + i) % this.capacity]!
    return out
  }
}

/** `n` as a whole number of at least 1, or `fallback` when it is missing or below 1. */
export const positive = (n: number | undefined, fallback: number): number =>
  n === undefined || !(n >= 1) ? fallback : Math.floor(n)
