/**
 * The HTTP adapter's options: what a caller may set, the defaults, the settings
 * the handlers run with once the defaults are applied, and the same options read
 * from the environment (PAGANTIC_*).
 */
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import type { AnyDefinition } from "../../services/Runs.js"
import * as Guard from "./Guard.js"
import type { KeyEntry } from "./Keys.js"
import { backstopOf } from "./Lifetime.js"

export interface Options {
  /** Default 8080; 0 picks a free port (read it from `HttpServer.HttpServer`'s address). */
  readonly port?: number | undefined
  /** Default "127.0.0.1": loopback only unless asked otherwise. */
  readonly host?: string | undefined
  /** Largest accepted request body. Default 1 MiB; larger bodies get 413. */
  readonly maxBodyBytes?: number | undefined
  /**
   * Longest a request may run. Default 5 minutes. Sent to the facade as the
   * request's timeout hint (a shorter hint from the client wins), so the request
   * ends in CANCELLED_TIMEOUT (504) with its partial output.
   */
  readonly requestTimeout?: Duration.DurationInput | undefined
  /**
   * The key of the admin principal named `admin`. With it, `keys` or `keysFile`
   * set, every route but /health and the page's static files needs
   * `Authorization: Bearer <key>` (401 otherwise), and what a principal starts
   * is its own (see `Principal`). With none, everyone who reaches the server is
   * one admin: a server listening beyond loopback that way logs a warning at start.
   */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** Principals and their keys (or the keys' SHA-256), besides `apiKey`'s; see `Keys`. */
  readonly keys?: ReadonlyArray<KeyEntry> | undefined
  /** A keys file (`pagantic keys add` writes one): more principals, read at start. */
  readonly keysFile?: string | undefined
  /** Host header names accepted; default for a loopback bind: localhost, 127.0.0.1, ::1. See `Edge`. */
  readonly allowedHosts?: ReadonlyArray<string> | undefined
  /** Origins allowed by CORS. Default none: no CORS headers, so browsers keep other sites' pages out. */
  readonly corsOrigins?: ReadonlyArray<string> | undefined
  /** Bounds on what a body may hold (depth, size, schemas, enums, plans, grammars); see `Guard.Limits`. */
  readonly limits?: Partial<Guard.Limits> | undefined
  /**
   * Durable runs in flight the server admits at once (`/v1/run` asked
   * `respond-async`, `/v1/queries`), from start to end; past it 429 with
   * `Retry-After`. Default 32. See `Admission`.
   */
  readonly maxRunsInFlight?: number | undefined
  /** Of those, at most this many of one principal. Default 16. */
  readonly maxRunsPerPrincipal?: number | undefined
  /**
   * Longest a `/v1/run` asked `respond-async` may run: its timeout hint (a
   * shorter hint from the client wins), stated in the 202; past it the run ends
   * failed, CANCELLED_TIMEOUT. Default 30 minutes.
   */
  readonly asyncRunTimeout?: Duration.DurationInput | undefined
  /** `/v1/events/stream` listeners at once; past it 429 with `Retry-After`. Default 32. */
  readonly maxEventListeners?: number | undefined
  /**
   * Durable definitions a client may start by name at `POST /v1/runs` (the Runs
   * in context must have them registered), counted among the runs in flight.
   * Default none.
   */
  readonly definitions?: ReadonlyArray<AnyDefinition> | undefined
}

export const defaults = {
  port: 8080,
  host: "127.0.0.1",
  maxBodyBytes: 1024 * 1024,
  requestTimeout: Duration.minutes(5),
  maxRunsInFlight: 32,
  maxRunsPerPrincipal: 16,
  asyncRunTimeout: Duration.minutes(30),
  maxEventListeners: 32
}

/** What the handlers run with: the options with their defaults applied. */
export interface Settings {
  readonly maxBodyBytes: number
  /** The server's time limit in ms, the envelope's timeout hint; undefined when unbounded. */
  readonly limitMs: number | undefined
  /** How long the adapter waits for a run before it ends it itself; undefined when unbounded. */
  readonly backstop: Duration.Duration | undefined
  readonly limits: Guard.Limits
  readonly maxRunsInFlight: number
  readonly maxRunsPerPrincipal: number
  /** The time limit of an async run in ms; undefined when unbounded. */
  readonly asyncLimitMs: number | undefined
  readonly maxEventListeners: number
  readonly definitions: ReadonlyArray<AnyDefinition>
}

/** A duration as a positive number of ms, or undefined when it is unbounded (infinite or 0). */
const limitOf = (input: Duration.DurationInput): number | undefined => {
  const limit = Duration.decode(input)
  return Duration.isFinite(limit) && Duration.toMillis(limit) > 0 ? Duration.toMillis(limit) : undefined
}

/** A count as a whole number of at least 1 (a smaller or missing one: the default). */
const countOf = (n: number | undefined, fallback: number): number => (n === undefined || !(n >= 1) ? fallback : Math.floor(n))

export const settingsOf = (options: Options): Settings => {
  const limit = Duration.decode(options.requestTimeout ?? defaults.requestTimeout)
  const limitMs = limitOf(limit)
  return {
    maxBodyBytes: options.maxBodyBytes ?? defaults.maxBodyBytes,
    limitMs,
    backstop: limitMs === undefined ? undefined : backstopOf(limit),
    limits: { ...Guard.defaultLimits, ...options.limits },
    maxRunsInFlight: countOf(options.maxRunsInFlight, defaults.maxRunsInFlight),
    maxRunsPerPrincipal: countOf(options.maxRunsPerPrincipal, defaults.maxRunsPerPrincipal),
    asyncLimitMs: limitOf(options.asyncRunTimeout ?? defaults.asyncRunTimeout),
    maxEventListeners: countOf(options.maxEventListeners, defaults.maxEventListeners),
    definitions: options.definitions ?? []
  }
}

// ---------------------------------------------------------------------------
// From the environment
// ---------------------------------------------------------------------------

const commaList = (name: string) =>
  Config.map(Config.withDefault(Config.string(name), ""), (text) =>
    text.split(",").map((item) => item.trim()).filter((item) => item !== ""))

const count = (name: string) =>
  Config.integer(name).pipe(Config.validate({ message: "a whole number of at least 1", validation: (n) => n >= 1 }))

/** The options from the environment (see `Http.layerConfig`); `overrides` win over it. */
export const optionsConfig = (overrides: Options = {}): Config.Config<Options> =>
  Config.map(
    Config.all({
      port: Config.withDefault(
        Config.integer("PAGANTIC_PORT").pipe(
          Config.validate({ message: "a port from 0 to 65535", validation: (port) => port >= 0 && port <= 65_535 })
        ),
        defaults.port
      ),
      host: Config.withDefault(Config.string("PAGANTIC_HOST"), defaults.host),
      maxBodyBytes: Config.withDefault(Config.integer("PAGANTIC_MAX_BODY_BYTES"), defaults.maxBodyBytes),
      requestTimeout: Config.withDefault(Config.duration("PAGANTIC_REQUEST_TIMEOUT"), defaults.requestTimeout),
      apiKey: Config.option(Config.redacted("PAGANTIC_API_KEY")),
      keysFile: Config.option(Config.string("PAGANTIC_KEYS_FILE")),
      allowedHosts: commaList("PAGANTIC_ALLOWED_HOSTS"),
      corsOrigins: commaList("PAGANTIC_CORS_ORIGINS"),
      maxRunsInFlight: Config.withDefault(count("PAGANTIC_MAX_RUNS_IN_FLIGHT"), defaults.maxRunsInFlight),
      maxRunsPerPrincipal: Config.withDefault(count("PAGANTIC_MAX_RUNS_PER_PRINCIPAL"), defaults.maxRunsPerPrincipal),
      asyncRunTimeout: Config.withDefault(Config.duration("PAGANTIC_ASYNC_RUN_TIMEOUT"), defaults.asyncRunTimeout),
      maxEventListeners: Config.withDefault(count("PAGANTIC_MAX_EVENT_LISTENERS"), defaults.maxEventListeners)
    }),
    (env): Options => {
      const defined = Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)) as Options
      return {
        ...env,
        apiKey: Option.getOrUndefined(env.apiKey),
        keysFile: Option.getOrUndefined(env.keysFile),
        ...defined
      }
    }
  )
