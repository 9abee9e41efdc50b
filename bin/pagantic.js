#!/usr/bin/env node
// The `pagantic` command. An installed package runs its compiled entry point
// (dist/); a checkout of the repository, which has the TypeScript sources and tsx
// among its dev dependencies, runs the sources through tsx's loader instead.
import { existsSync } from "node:fs"

const compiled = new URL("../dist/adapters/main.js", import.meta.url)
const source = new URL("../src/adapters/main.ts", import.meta.url)

if (existsSync(source)) {
  const { register } = await import("tsx/esm/api")
  register()
  await import(source.href)
} else {
  await import(compiled.href)
}
