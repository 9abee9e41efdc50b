/** The sentiment requests the engine and vote benchmarks share. */
export { BUNDLED_SENTIMENT_SCHEMA as SENTIMENT } from "../src/layers/llama/PaganticChatWrapper.js"

const REVIEWS = [
  "Classify the sentiment of the review: The food was cold and the waiter was rude.",
  "Classify the sentiment of the review: Not bad at all, I would come back.",
  "Classify the sentiment of the review: It was fine, nothing special.",
  "Classify the sentiment of the review: Absolutely loved the staff and the view."
]

/** Review `key` (cycling through four), numbered so that no two keys share a whole prompt. */
export const reviewPrompt = (key: number): string => `${REVIEWS[key % REVIEWS.length]!} (#${key})`
