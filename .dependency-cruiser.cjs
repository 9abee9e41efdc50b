/**
 * The dependency rule of shared/DESIGN.md, checked on every `npm test`:
 *   domain   imports nothing of ours (only effect)
 *   services import only domain
 *   layers   import services and domain, never programs or adapters
 *   programs import services and domain, never layers or adapters
 *   layers   do not import each other (each implements one concept; a consumer
 *            defines the small interface it needs): a layer file imports only its
 *            own folder (llama/, openai/, tools/, durable/, observe/); the one exception is the
 *            observe band, whose OpenTelemetry layer builds on the in-memory one
 *   adapters may compose everything
 *   only layers (and adapters) import the durable engine's storage: cluster, sql,
 *            database drivers
 */
/** The services a service module is defined over, by design: each may import that one service and no other. */
const servicesOver = {
  Validator: { over: "RetryPolicy", why: "its retry decision" },
  ResponderRegistry: { over: "Engine", why: "an LLM responder is an engine" },
  Runs: { over: "Durable", why: "a run's answers are Durable's shapes" }
}

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "domain-is-leaf",
      comment: "src/domain imports only effect and other domain modules",
      severity: "error",
      from: { path: "^src/domain/" },
      to: { path: "^src/", pathNot: "^src/domain/" }
    },
    {
      name: "domain-only-effect",
      comment: "src/domain may import no npm package but effect",
      severity: "error",
      from: { path: "^src/domain/" },
      to: { dependencyTypes: ["npm", "npm-dev", "npm-optional", "npm-peer", "npm-no-pkg", "npm-unknown"], pathNot: "node_modules/effect/" }
    },
    {
      name: "services-see-only-domain",
      comment: "src/services imports only src/domain (and other services)",
      severity: "error",
      from: { path: "^src/services/" },
      to: { path: "^src/", pathNot: "^src/(domain|services)/" }
    },
    {
      name: "services-over-listed-services",
      comment: `a service module is defined over another only by design (servicesOver above); any other service imports only domain and services/internal`,
      severity: "error",
      from: { path: "^src/services/[^/]+\\.ts$", pathNot: `^src/services/(${Object.keys(servicesOver).join("|")})\\.ts$` },
      to: { path: "^src/services/[^/]+\\.ts$" }
    },
    ...Object.entries(servicesOver).map(([service, { over, why }]) => ({
      name: `${service}-over-${over}-only`,
      comment: why,
      severity: "error",
      from: { path: `^src/services/${service}\\.ts$` },
      to: { path: "^src/services/[^/]+\\.ts$", pathNot: `^src/services/${over}\\.ts$` }
    })),
    {
      name: "layers-never-import-programs",
      comment: "src/layers implement services; they never import programs or adapters",
      severity: "error",
      from: { path: "^src/layers/" },
      to: { path: "^src/(programs|adapters)/" }
    },
    {
      name: "layers-apart",
      comment: "a layer does not import another layer (the middle band stays apart): only its own folder",
      severity: "error",
      from: { path: "^src/layers/([^/]+)\\.ts$", pathNot: "^src/layers/Telemetry\\.ts$" },
      to: { path: "^src/layers/", pathNot: "^src/layers/(llama|openai|tools|durable|observe)/" }
    },
    {
      name: "observe-parts-private",
      comment: "observe/ holds the in-memory observe layer's parts: only InMemoryObserve (and its own folder) imports them",
      severity: "error",
      from: { path: "^src/layers/", pathNot: "^src/layers/(InMemoryObserve\\.ts|observe/)" },
      to: { path: "^src/layers/observe/" }
    },
    {
      name: "layers-apart-observe",
      comment: "the OpenTelemetry layer may build on the in-memory observe layer and its own parts (telemetry/), on nothing else",
      severity: "error",
      from: { path: "^src/layers/Telemetry\\.ts$" },
      to: { path: "^src/layers/", pathNot: "^src/layers/(InMemoryObserve\\.ts|telemetry/)" }
    },
    {
      name: "telemetry-parts-private",
      comment: "telemetry/ holds the OpenTelemetry layer's parts: only Telemetry (and its own folder) imports them",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/layers/(Telemetry\\.ts|telemetry/)" },
      to: { path: "^src/layers/telemetry/" }
    },
    {
      name: "storage-only-in-layers",
      comment: "the durable engine's storage (cluster runners, SQL clients, database drivers) is imported by layers (and adapters) only",
      severity: "error",
      from: { path: "^src/(domain|services|programs)/" },
      to: { path: "node_modules/(@effect/(cluster|sql|sql-sqlite-node|sql-pg)|better-sqlite3|pg|postgres)/" }
    },
    {
      name: "programs-never-import-layers",
      comment: "src/programs see only service Tags: never layers or adapters",
      severity: "error",
      from: { path: "^src/programs/" },
      to: { path: "^src/(layers|adapters)/" }
    },
    {
      name: "no-circular",
      severity: "error",
      from: {},
      to: { circular: true }
    },
    {
      name: "not-to-unresolvable",
      severity: "error",
      from: {},
      to: { couldNotResolve: true }
    }
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      extensions: [".ts", ".js", ".mjs", ".cjs", ".json"]
    }
  }
}
