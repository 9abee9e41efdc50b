/**
 * The parent's side of the patterns' crash tests: spawns
 * test/support/patterns-child.ts, reads its JSON lines (each wait bounded), and
 * SIGKILLs it.
 */
import * as path from "node:path"
import { type Child as AnyChild, root, spawnLines } from "./child.js"
import type { Config } from "./patterns-child.js"

const child = path.join(root, "test", "support", "patterns-child.ts")

export interface ChildLine {
  readonly event: string
  readonly pid: number
  readonly [key: string]: unknown
}

export type Child = AnyChild<ChildLine>

/** `next` returns the first line with an event, every time. */
export const spawnChild = (config: Config): Child =>
  spawnLines<ChildLine>(["--import", "tsx", child, JSON.stringify(config)], { consume: false })
