/** Ready-made tools. */
export * as Calculator from "./Calculator.js"
