/**
 * `pagantic/telemetry`: spans and metrics exported over OTLP through
 * @effect/opentelemetry, apart from the main entry so that importing `pagantic`
 * never loads the OpenTelemetry SDK.
 *
 * @example
 * import { Telemetry } from "pagantic/telemetry"
 * const observed = Telemetry.layerConfig() // PAGANTIC_OTLP_ENDPOINT; nothing is exported without it
 */
export * as Telemetry from "./layers/Telemetry.js"
