/**
 * The demo's inputs: the questions and reviews it sends and its plan, chosen for
 * the bundled model (its sentiment system prompt and schema are the ones it was
 * trained with, training/tasks.ts).
 */
import { BUNDLED_SENTIMENT_SCHEMA } from "../../../layers/llama/PaganticChatWrapper.js"

/** The demo's plan (also in examples/plan.json): a tool step, then an inference with a schema. */
export const demoPlan = {
  steps: [
    { name: "sum", type: "tool", input: { name: "calculator", arguments: { expression: "12 + 7" } } },
    {
      name: "classify",
      type: "infer",
      input: {
        messages: [
          { _tag: "SystemMessage", role: "system", content: "Classify the sentiment of the review." },
          { _tag: "UserMessage", role: "user", content: "The staff was very friendly. Would buy again." }
        ],
        schema: BUNDLED_SENTIMENT_SCHEMA,
        temperature: 0
      }
    }
  ]
}

/** The system prompt the bundled model was trained with for sentiment. */
export const SENTIMENT_SYSTEM = "Classify the sentiment of the review."
export const DEMO_QUESTION = "What is 12 plus 7?"
/** The orchestrated request: two reviews and a sum, the sum after the reviews. */
export const DEMO_TASK =
  'Classify these reviews: "The room was spotless." and "The waiter ignored us.", then add up 12, 30 and 7.'
export const DEMO_REVIEW = "The pasta was absolutely delicious and the waiter was lovely."
export const DEMO_VOTE_REVIEW = "The hotel was fine. Nothing special."
export const DEMO_TEMPERATURE = 0.8
/** The labels the demo's queries classify into (the bundled model's sentiment labels). */
export const DEMO_LABELS = ["positive", "negative", "neutral"] as const
/** The waterfall's review: plain enough that the samples may disagree. */
export const DEMO_WATERFALL_REVIEW = "The hotel was fine. Nothing special."
/** The escalation's review, and what the demo's human reviewer answers (the demo plays the human). */
export const DEMO_ESCALATE_REVIEW = "The room was clean but the staff never smiled."
export const DEMO_HUMAN_ANSWER = {
  kind: "core.classification.v1",
  category: "neutral",
  _confidence: 0.95,
  _rationale: "a clean room, unfriendly staff: mixed, so neutral"
} as const
