/**
 * What every bench file shares: the row of bench/index.ts's table and the small
 * statistics the rows are made of.
 */

/** A row of the table: ours against a baseline measured side by side in one run. */
export interface Row {
  readonly name: string
  readonly ours: string
  readonly baseline: string
  readonly ratio: number
  /** The interquartile range of the ratio, or "-" where a scenario runs once. */
  readonly spread: string
  readonly goal: string
  readonly met: boolean
}

export const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

export const quantile = (xs: ReadonlyArray<number>, q: number): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.round(q * (s.length - 1))))]!
}

/** Bytes as megabytes, one decimal. */
export const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`
