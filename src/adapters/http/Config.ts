/**
 * The HTTP adapter's options: what a caller may set, the defaults, the settings
 * the handlers run with once the defaults are applied, and the same options read
 * from the environment (PAGANTIC_*).
 */
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Guard from "./Guard.js"
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
   * When set, every route but /health needs `Authorization: Bearer <key>` (401
   * otherwise). A server listening beyond loopback without a key logs a warning
   * at start: anyone who can reach it can run the model and its tools.
   */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** Host header names accepted; default for a loopback bind: localhost, 127.0.0.1, ::1. See `Edge`. */
  readonly allowedHosts?: ReadonlyArray<string> | undefined
  /** Origins allowed by CORS. Default none: no CORS headers, so browsers keep other sites' pages out. */
  readonly corsOrigins?: ReadonlyArray<string> | undefined
  /** Bounds on what a body may hold (depth, size, schemas, enums, plans, grammars); see `Guard.Limits`. */
  readonly limits?: Partial<Guard.Limits> | undefined
}

export const defaults = {
  port: 8080,
  host: "127.0.0.1",
  maxBodyBytes: 1024 * 1024,
  requestTimeout: Duration.minutes(5)
}

/** What the handlers run with: the options with their defaults applied. */
export interface Settings {
  readonly maxBodyBytes: number
  /** The server's time limit in ms, the envelope's timeout hint; undefined when unbounded. */
  readonly limitMs: number | undefined
  /** How long the adapter waits for a run before it ends it itself; undefined when unbounded. */
  readonly backstop: Duration.Duration | undefined
  readonly limits: Guard.Limits
}

export const settingsOf = (options: Options): Settings => {
  const limit = Duration.decode(options.requestTimeout ?? defaults.requestTimeout)
  const limitMs = Duration.isFinite(limit) && Duration.toMillis(limit) > 0 ? Duration.toMillis(limit) : undefined
  return {
    maxBodyBytes: options.maxBodyBytes ?? defaults.maxBodyBytes,
    limitMs,
    backstop: limitMs === undefined ? undefined : backstopOf(limit),
    limits: { ...Guard.defaultLimits, ...options.limits }
  }
}

// ---------------------------------------------------------------------------
// From the environment
// ---------------------------------------------------------------------------

const commaList = (name: string) =>
  Config.map(Config.withDefault(Config.string(name), ""), (text) =>
    text.split(",").map((item) => item.trim()).filter((item) => item !== ""))

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
      allowedHosts: commaList("PAGANTIC_ALLOWED_HOSTS"),
      corsOrigins: commaList("PAGANTIC_CORS_ORIGINS")
    }),
    (env): Options => {
      const defined = Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)) as Options
      return {
        ...env,
        apiKey: Option.getOrUndefined(env.apiKey),
        ...defined
      }
    }
  )
