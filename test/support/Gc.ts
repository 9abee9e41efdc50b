/**
 * V8's collector for tests that check what a value leaves reachable: `gc`, the
 * flag set at run time when node was not started with --expose-gc, and
 * `collect`, collections across jobs (a WeakRef's target is kept to the end of
 * the job that made or read it).
 */
import * as v8 from "node:v8"
import * as vm from "node:vm"

export const gc: () => void = (() => {
  const exposed = (globalThis as { gc?: () => void }).gc
  if (exposed !== undefined) return exposed
  v8.setFlagsFromString("--expose-gc")
  return vm.runInNewContext("gc") as () => void
})()

/** Three collections, each in a job of its own. */
export const collect = async (): Promise<void> => {
  for (let i = 0; i < 3; i++) {
    await new Promise((resolve) => setImmediate(resolve))
    gc()
  }
}
