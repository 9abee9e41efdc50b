#!/usr/bin/env node
// The `pagantic` command: runs the TypeScript entry point through tsx's loader.
import { register } from "tsx/esm/api"

register()
await import(new URL("../src/adapters/main.ts", import.meta.url).href)
