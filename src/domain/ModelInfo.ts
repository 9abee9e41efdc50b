/**
 * Layer 0: what an engine says about the model behind it.
 */
import * as Schema from "effect/Schema"

export class ModelInfo extends Schema.Class<ModelInfo>("ModelInfo")({
  name: Schema.String,
  contextWindow: Schema.NonNegativeInt,
  /** Whether the engine can constrain decoding by a JSON schema or a GBNF grammar. */
  supportsGrammar: Schema.Boolean,
  /** Whether the engine speaks native tool calling. */
  supportsTools: Schema.Boolean
}) {}
