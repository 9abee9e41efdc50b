/**
 * `pagantic/cli`: the command-line adapter (`pagantic chat | extract | vote | plan | serve | demo`)
 * as an @effect/cli Command, for embedding or testing.
 */
export * as Cli from "./adapters/Cli.js"
export * as Live from "./adapters/Live.js"
