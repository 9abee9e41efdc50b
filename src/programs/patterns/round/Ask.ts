/**
 * A machine CALL (pattern, system or llm responder): one single-shot question
 * bounded by the candidate's latency, its outcome always a DO (a submit or a
 * failure, never a failed effect) with the tokens it spent.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Records from "../../../domain/Records.js"
import type * as TokenUsage from "../../../domain/TokenUsage.js"
import type * as Check from "../../query/Check.js"
import type * as Select from "../../query/Select.js"
import * as SingleShot from "../../query/SingleShot.js"
import type { DoStep } from "./Forms.js"
import { doRecord, failureBody } from "./Journal.js"
import type { Spec, Thread } from "./Types.js"

/** One pattern, system or llm call: its DO (a submit or a failure, never a failed effect) and its tokens. */
export const ask = (
  thread: Thread,
  spec: Spec,
  candidate: Select.Candidate,
  call: Records.Call,
  input: string,
  dial: number | undefined,
  kind: Records.AnswerKind
): Effect.Effect<typeof DoStep.Type> =>
  Effect.gen(function* () {
    let tokens = 0
    const onUsage = (u: TokenUsage.TokenUsage) => {
      tokens += u.promptTokens + u.outputTokens
    }
    const checked: Check.Checked = spec.shape === undefined
      ? { ...thread.checked, dial }
      : { ...thread.checked, dial, shape: spec.shape.checker, query: { ...thread.checked.query, answer_shape: spec.shape.wire } }
    const outcome = yield* SingleShot.askWithin(candidate, input, checked, { maxTemperature: thread.options.maxTemperature }, onUsage)
    const key = `${spec.key}/do/${candidate.index}`
    const body: Records.DoBody = Either.match(outcome, {
      onLeft: (problem) => failureBody(call, problem),
      onRight: (answer) => Records.submitBody(kind, call.body.correlation_id, answer)
    })
    return { record: doRecord(thread, key, call, body), tokens }
  })
