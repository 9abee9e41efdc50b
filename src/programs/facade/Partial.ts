/**
 * A request's partial output: what a request that fails, times out or is
 * cancelled answers with. In chat, the text of the latest inference (a new
 * inference starts it over); in plan, the outputs of the steps so far.
 *
 * A cell written and read only inside synchronous steps of the request's
 * fibers (one step is atomic between fibers, as a Ref's update is), so the
 * turn's events update it in the step that sees them.
 */
export interface Partial {
  text: string
}

/** An empty partial output. */
export const make = (): Partial => ({ text: "" })
