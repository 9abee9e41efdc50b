/**
 * Memory on SQL: the ConversationStore and SessionState in tables, so chat
 * sessions survive a restart. A history is one row per session (the messages
 * encoded with the Message schema, replaced as a whole, so a reader never sees
 * half a turn); session state is one row per key. The tables are created when the
 * layer is built. `layer` runs on any SqlClient; `layerSqlite` opens a SQLite file
 * of its own (created 0600, owned by one process like the runs' state file).
 *
 * The services' methods have no error channel: a store that fails (after the
 * runs' short retry schedule) is a defect, and a value that is not JSON cannot be
 * stored (a defect naming the key).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as path from "node:path"
import { OrchestrationFailure } from "../domain/Failure.js"
import { Message } from "../domain/Message.js"
import type { Service as ConversationService } from "../services/ConversationStore.js"
import { ConversationStore } from "../services/ConversationStore.js"
import type { Service as SessionStateService } from "../services/SessionState.js"
import { SessionState } from "../services/SessionState.js"
import * as Owner from "./durable/Owner.js"
import { storeRetry } from "./durable/Tables.js"

const History = Schema.parseJson(Schema.Array(Message))
const encodeHistory = Schema.encode(History)
const decodeHistory = Schema.decodeUnknown(History)

const orDie = (what: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.retry({ schedule: storeRetry, while: (error) => (error as { _tag?: string })._tag === "SqlError" }),
    Effect.orDieWith((error) =>
      OrchestrationFailure.stateUnavailable(`the memory store failed to ${what}: ${String((error as SqlError).message ?? error)}`, {
        cause: error
      })
    )
  )

const migrate = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS pagantic_conversations (
    session_id TEXT PRIMARY KEY,
    messages TEXT NOT NULL,
    updated_at INTEGER NOT NULL
  )`
  yield* sql`CREATE TABLE IF NOT EXISTS pagantic_session_state (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (session_id, key)
  )`
})

/** A ConversationStore on the SqlClient in context. */
export const makeConversationStore = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const read = (sessionId: string) =>
    Effect.flatMap(
      sql<{ messages: string }>`SELECT messages FROM pagantic_conversations WHERE session_id = ${sessionId}`,
      (rows) => (rows.length === 0 ? Effect.succeed([]) : decodeHistory(rows[0]!.messages))
    )
  const write = (sessionId: string, messages: ReadonlyArray<Message>) =>
    Effect.gen(function* () {
      const text = yield* encodeHistory(messages)
      const at = yield* Clock.currentTimeMillis
      yield* sql`INSERT INTO pagantic_conversations (session_id, messages, updated_at) VALUES (${sessionId}, ${text}, ${at})
        ON CONFLICT (session_id) DO UPDATE SET messages = excluded.messages, updated_at = excluded.updated_at`
    })
  return {
    load: (sessionId) => read(sessionId).pipe(orDie(`load session ${sessionId}`)),
    append: (sessionId, messages) =>
      sql.withTransaction(Effect.flatMap(read(sessionId), (history) => write(sessionId, [...history, ...messages]))).pipe(
        orDie(`append to session ${sessionId}`)
      ),
    save: (sessionId, messages) => write(sessionId, messages).pipe(orDie(`save session ${sessionId}`)),
    clear: (sessionId) =>
      sql`DELETE FROM pagantic_conversations WHERE session_id = ${sessionId}`.pipe(
        Effect.asVoid,
        orDie(`clear session ${sessionId}`)
      ),
    sessions: sql<{ session_id: string }>`SELECT session_id FROM pagantic_conversations ORDER BY updated_at, session_id`.pipe(
      Effect.map((rows) => rows.map((row) => row.session_id)),
      orDie("list sessions")
    )
  } satisfies ConversationService
})

const toJson = (sessionId: string, key: string, value: unknown) =>
  Effect.try({
    try: () => JSON.stringify(value),
    catch: (error) => new Error(`the value of key "${key}" of session ${sessionId} is not JSON: ${String(error)}`)
  }).pipe(
    Effect.flatMap((text) =>
      text === undefined
        ? Effect.fail(new Error(`the value of key "${key}" of session ${sessionId} is not JSON (${typeof value})`))
        : Effect.succeed(text)
    ),
    Effect.orDie
  )

/** A SessionState on the SqlClient in context. */
export const makeSessionState = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return {
    get: (sessionId, key) =>
      sql<{ value: string }>`SELECT value FROM pagantic_session_state WHERE session_id = ${sessionId} AND key = ${key}`.pipe(
        Effect.map((rows) => (rows.length === 0 ? Option.none() : Option.some(JSON.parse(rows[0]!.value) as unknown))),
        orDie(`read key ${key} of session ${sessionId}`)
      ),
    set: (sessionId, key, value) =>
      Effect.flatMap(toJson(sessionId, key, value), (text) =>
        sql`INSERT INTO pagantic_session_state (session_id, key, value, position)
            VALUES (${sessionId}, ${key}, ${text},
              (SELECT COALESCE(MAX(position), 0) + 1 FROM pagantic_session_state WHERE session_id = ${sessionId}))
          ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value`.pipe(
          Effect.asVoid,
          orDie(`set key ${key} of session ${sessionId}`)
        )),
    delete: (sessionId, key) =>
      sql`DELETE FROM pagantic_session_state WHERE session_id = ${sessionId} AND key = ${key}`.pipe(
        Effect.asVoid,
        orDie(`delete key ${key} of session ${sessionId}`)
      ),
    snapshot: (sessionId) =>
      sql<{ key: string; value: string }>`SELECT key, value FROM pagantic_session_state WHERE session_id = ${sessionId}
        ORDER BY position`.pipe(
        Effect.map((rows) => Object.fromEntries(rows.map((row) => [row.key, JSON.parse(row.value) as unknown]))),
        orDie(`read session ${sessionId}`)
      ),
    list: (sessionId) =>
      sql<{ key: string }>`SELECT key FROM pagantic_session_state WHERE session_id = ${sessionId} ORDER BY position`.pipe(
        Effect.map((rows) => rows.map((row) => row.key)),
        orDie(`list the keys of session ${sessionId}`)
      ),
    clear: (sessionId) =>
      sql`DELETE FROM pagantic_session_state WHERE session_id = ${sessionId}`.pipe(
        Effect.asVoid,
        orDie(`clear session ${sessionId}`)
      )
  } satisfies SessionStateService
})

/** Both services on the SqlClient in context, their tables created first. */
export const layer: Layer.Layer<ConversationStore | SessionState, never, SqlClient.SqlClient> = Layer.mergeAll(
  Layer.effect(ConversationStore, makeConversationStore),
  Layer.effect(SessionState, makeSessionState)
).pipe(Layer.provide(Layer.effectDiscard(migrate.pipe(orDie("create its tables")))))

/** Both services on a SQLite file of their own (default `.pagantic/memory.db`), owned by this process. */
export const layerSqlite = (options: { readonly filename?: string | undefined } = {}): Layer.Layer<
  ConversationStore | SessionState,
  OrchestrationFailure
> => {
  const filename = options.filename ?? ".pagantic/memory.db"
  return Layer.unwrapScoped(
    Effect.gen(function* () {
      yield* Effect.try({
        try: () => {
          fs.mkdirSync(path.dirname(path.resolve(filename)), { recursive: true })
          fs.closeSync(fs.openSync(filename, "a", 0o600))
        },
        catch: (error) => OrchestrationFailure.stateUnavailable(`cannot create the memory file ${filename}: ${String(error)}`)
      })
      yield* Owner.acquire(filename)
      return layer.pipe(
        Layer.provide(
          SqliteClient.layer({ filename }).pipe(
            Layer.mapError((error) => OrchestrationFailure.stateUnavailable(`cannot open ${filename}: ${error.message}`))
          )
        )
      )
    })
  )
}
