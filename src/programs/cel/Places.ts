/**
 * The places a CEL expression may stand in a query, what each sees and the type
 * it must yield, the bounds on one expression, and one type-checking
 * environment per place, built on first use.
 */
import { Environment } from "@marcbachmann/cel-js"
import { AnswerView, AuditView, FoldView, ResponderView, ResponseView } from "./Views.js"

export interface Variables {
  readonly responder: ResponderView
  readonly response: ResponseView
  readonly responses: ReadonlyArray<ResponseView>
  readonly fold: FoldView
  readonly audit: AuditView
}
export type Variable = keyof Variables

/** Where an expression stands, what it sees and what it must yield. */
export const places = {
  /** `responders[].expression`: is this candidate wanted? */
  predicate: { variables: ["responder"], returns: "bool" },
  /** `fold.weight_expression`: the weight of one response. */
  weight: { variables: ["response"], returns: "number" },
  /** `fold.expression`: the index of the chosen response. */
  choice: { variables: ["responses"], returns: "int" },
  /** `verify.agreement_threshold`: the agreement needed, from the two responses. */
  agreement: { variables: ["responses"], returns: "number" },
  /** retry, escalate and waterfall expressions: a decision on the fold. */
  decision: { variables: ["fold"], returns: "bool" },
  /** `ensemble_with_audit.audit_expression`: the auditor approved. */
  audit: { variables: ["audit", "fold"], returns: "bool" }
} as const satisfies Record<string, { readonly variables: ReadonlyArray<Variable>; readonly returns: "bool" | "number" | "int" }>

export type Place = keyof typeof places
type Returns = { readonly bool: boolean; readonly number: number; readonly int: number }
export type ResultOf<P extends Place> = Returns[(typeof places)[P]["returns"]]
export type VariablesOf<P extends Place> = Pick<Variables, (typeof places)[P]["variables"][number]>

export const acceptedTypes: Record<"bool" | "number" | "int", ReadonlyArray<string>> = {
  bool: ["bool", "dyn"],
  number: ["double", "int", "uint", "dyn"],
  int: ["int", "uint", "dyn"]
}

/** Bounds on one expression beyond its length (the wire bounds that). */
export const limits = {
  maxAstNodes: 256,
  maxDepth: 24,
  /** Comprehensions (all, exists, map, filter...) nested in each other. */
  maxComprehensionNesting: 2
} as const

const declare = (variables: ReadonlyArray<Variable>): Environment => {
  const env = new Environment({
    limits: { maxAstNodes: limits.maxAstNodes, maxDepth: limits.maxDepth, maxListElements: 64, maxMapEntries: 64 }
  })
  const has = (v: Variable) => variables.includes(v)
  if (has("responder")) {
    env.registerType("Responder", {
      ctor: ResponderView,
      fields: {
        id: "string",
        kind: "string",
        name: "string",
        capabilities: "list<string>",
        model: "string",
        did: "string",
        description: "string",
        tags: "list<string>",
        availability: "map<string, dyn>",
        metadata: "map<string, dyn>"
      }
    })
    env.registerVariable("responder", "Responder")
  }
  if (has("response") || has("responses")) {
    env.registerType("Response", {
      ctor: ResponseView,
      fields: {
        index: "int",
        responder: "string",
        kind: "string",
        attempt: "int",
        stage: "int",
        record_id: "string",
        answer: "dyn",
        confidence: "double",
        rationale: "string"
      }
    })
    if (has("response")) env.registerVariable("response", "Response")
    if (has("responses")) env.registerVariable("responses", "list<Response>")
  }
  if (has("fold")) {
    env.registerType("Answer", {
      ctor: AnswerView,
      fields: { value: "dyn", confidence: "double", rationale: "string", responder: "string", record_id: "string" }
    })
    env.registerType("Fold", {
      ctor: FoldView,
      fields: { function: "string", answer: "Answer", support: "int", valid: "int", total: "int" }
    })
    env.registerVariable("fold", "Fold")
  }
  if (has("audit")) {
    env.registerType("Audit", {
      ctor: AuditView,
      fields: { approved: "bool", rationale: "string", verdict: "dyn", responder: "string" }
    })
    env.registerVariable("audit", "Audit")
  }
  return env
}

// Building an environment is the expensive part: one per place, on first use.
const environments = new Map<Place, Environment>()
export const environment = (place: Place): Environment => {
  const known = environments.get(place)
  if (known !== undefined) return known
  const made = declare(places[place].variables)
  environments.set(place, made)
  return made
}
