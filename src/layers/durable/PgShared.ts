/**
 * Several runner processes on one Postgres database: what each must know of the
 * others. A change of a run (its row moved, a record appended) is sent with
 * NOTIFY on one channel and received with LISTEN, so `await` and `events` in one
 * process follow a run going in another. A run's recorded owner is alive when its
 * runner's heartbeat in the cluster's runner table is fresh (within the shard lock
 * expiration) and the runner is not marked unhealthy.
 */
import type * as PgClient from "@effect/sql-pg/PgClient"
import type * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type { Change, Shared } from "./Runtime.js"

/** The NOTIFY channel of run changes. */
export const channel = "pagantic_runs"

/** An owner is `host:port/pid`: the runner's address, then which process. */
export const ownerOf = (host: string, port: number): string => `${host}:${port}/${process.pid}`

const decode = (payload: string): Change | undefined => {
  try {
    const parsed = JSON.parse(payload) as { readonly r?: unknown; readonly s?: unknown }
    return typeof parsed.r === "string" ? { runId: parsed.r, status: parsed.s === 1 } : undefined
  } catch {
    return undefined
  }
}

/** A lost listen connection is opened again after a second, for as long as the layer lives. */
const relisten = Schedule.spaced("1 second")

export const make = (pg: PgClient.PgClient, runners: RunnerStorage.RunnerStorage["Type"]): Shared => {
  const notice = (change: Change) => ({ channel, payload: JSON.stringify({ r: change.runId, s: change.status ? 1 : 0 }) })
  return {
    notice,
    // pg_notify, not PgClient.notify: the latter sends `NOTIFY channel, $1`, which Postgres refuses (NOTIFY takes no parameters)
    publish: (change) => {
      const sent = notice(change)
      return pg`SELECT pg_notify(${sent.channel}, ${sent.payload})`.pipe(
        Effect.asVoid,
        Effect.catchAll((error) => Effect.logWarning(`NOTIFY of run ${change.runId} failed: ${error.message}`))
      )
    },
    changes: pg.listen(channel).pipe(
      Stream.tapError((error) => Effect.logWarning(`LISTEN ${channel} failed, listening again: ${error.message}`)),
      Stream.retry(relisten),
      Stream.map(decode),
      Stream.filter((change): change is Change => change !== undefined),
      Stream.catchAll(() => Stream.empty)
    ),
    isLive: runners.getRunners.pipe(
      Effect.map((rows) => {
        const live = new Set(rows.filter(([, healthy]) => healthy).map(([runner]) => `${runner.address.host}:${runner.address.port}`))
        return (owner: string) => {
          const slash = owner.lastIndexOf("/")
          return slash > 0 && live.has(owner.slice(0, slash))
        }
      }),
      // the runner table unreadable: nobody else counts as alive (their runs read stale), never a failure of a read
      Effect.orElseSucceed(() => (_: string) => false)
    )
  }
}
