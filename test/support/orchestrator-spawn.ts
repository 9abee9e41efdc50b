/**
 * The parent's side of the orchestrator crash test: spawns
 * test/support/orchestrator-child.ts, reads its JSON lines, SIGKILLs it. Every
 * wait has a bound.
 */
import { type Child as AnyChild, spawnTsx } from "./child.js"
import type { Config } from "./orchestrator-child.js"

export interface ChildLine {
  readonly event: string
  readonly pid: number
  readonly [key: string]: unknown
}

export type Child = AnyChild<ChildLine>

/** `next` returns the first line with an event, every time. */
export const spawnChild = (config: Config): Child => spawnTsx<ChildLine>("orchestrator-child.ts", config, { consume: false })
