/**
 * The parent's side of the patterns' crash tests: spawns
 * test/support/patterns-child.ts, reads its JSON lines (each wait bounded), and
 * SIGKILLs it.
 */
import { type Child as AnyChild, spawnTsx } from "./child.js"
import type { Config } from "./patterns-child.js"

export interface ChildLine {
  readonly event: string
  readonly pid: number
  readonly [key: string]: unknown
}

export type Child = AnyChild<ChildLine>

/** `next` returns the first line with an event, every time. */
export const spawnChild = (config: Config): Child => spawnTsx<ChildLine>("patterns-child.ts", config, { consume: false })
