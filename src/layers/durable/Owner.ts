/**
 * One owning process per state file. SQLite shared by several processes stalls
 * the engine's storage ("database is locked"), so the first process to open a
 * state file writes `<file>.owner` (its pid, created exclusively) and holds it
 * for the layer's lifetime; a second one fails fast with
 * ORCHESTRATION_STATE_UNAVAILABLE naming the owner. An owner file left by a
 * process that is gone (killed) is taken over. A second layer in the same
 * process is refused too. A prune does not own the file (SqliteRuns.prune: one
 * short transaction under a busy timeout, beside the owner).
 */
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import type * as Scope from "effect/Scope"
import { OrchestrationFailure } from "../../domain/Failure.js"

interface OwnerFile {
  readonly pid: number
  readonly token: string
  readonly since: string
}

const alive = (pid: number): boolean => {
  if (pid === process.pid) return true
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

const readOwner = (path: string): OwnerFile | undefined => {
  try {
    const parsed = JSON.parse(fs.readFileSync(path, "utf8")) as Partial<OwnerFile>
    return typeof parsed.pid === "number" && typeof parsed.token === "string"
      ? { pid: parsed.pid, token: parsed.token, since: String(parsed.since) }
      : undefined
  } catch {
    return undefined
  }
}

/** Tries once to create the owner file; the existing owner when one holds it. */
const tryCreate = (path: string, mine: OwnerFile): OwnerFile | "created" => {
  try {
    fs.writeFileSync(path, JSON.stringify(mine), { flag: "wx", mode: 0o600 })
    return "created"
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
    return readOwner(path) ?? { pid: -1, token: "", since: "unreadable" }
  }
}

/**
 * Owns `file` for the scope: creates `<file>.owner` or fails naming who holds it.
 * A holder that is not alive (or an unreadable owner file) is replaced.
 */
export const acquire = (file: string): Effect.Effect<void, OrchestrationFailure, Scope.Scope> => {
  const path = `${file}.owner`
  const mine: OwnerFile = { pid: process.pid, token: globalThis.crypto.randomUUID(), since: new Date().toISOString() }
  const attempt = Effect.try({
    try: () => {
      const first = tryCreate(path, mine)
      if (first === "created") return undefined
      if (first.pid > 0 && alive(first.pid)) return first
      // the holder is gone: take its place (a racing taker loses on the exclusive create)
      fs.rmSync(path, { force: true })
      const second = tryCreate(path, mine)
      return second === "created" ? undefined : second
    },
    catch: (error) =>
      OrchestrationFailure.stateUnavailable(`cannot create the owner file ${path}: ${String(error)}`, { cause: error })
  })
  return Effect.acquireRelease(
    Effect.flatMap(attempt, (holder) =>
      holder === undefined
        ? Effect.void
        : Effect.fail(
          OrchestrationFailure.stateUnavailable(
            `the state file ${file} is owned by process ${holder.pid} (since ${holder.since}); one process owns a SQLite state file`,
            { details: { file, ownerPid: holder.pid, ownerSince: holder.since } }
          )
        )
    ),
    () =>
      Effect.sync(() => {
        if (readOwner(path)?.token === mine.token) fs.rmSync(path, { force: true })
      })
  )
}
