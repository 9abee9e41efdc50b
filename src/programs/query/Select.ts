/**
 * Choosing the responders a query is dispatched to.
 *
 * Three steps, in this order. Matching: each predicate of the query picks the
 * registered responders of its kind that fit it (capability, system name, model
 * with `~aliases` resolved, did); a responder matched by several predicates is
 * taken once, by the first. The hard filter: a candidate is dropped when it is not
 * available, outside its hours, too slow (typical delay above half of the query's
 * `max_latency_secs`, or its kind's default wait), not seen for too long, or when
 * its predicate's CEL expression is false. Relevance: the survivors are scored
 * against the query's text by the Reranker (their description and tags), and the
 * best `top_k` are kept; ties keep match order.
 *
 * When nothing survives, the query fails with ORCHESTRATION_NO_CONSENSUS saying
 * why each candidate was dropped and which predicates matched no one.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Construct from "../../domain/Construct.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import { Passage } from "../../domain/Passage.js"
import type { ResponderKind } from "../../domain/Query.js"
import * as Text from "../../domain/Text.js"
import { RerankInput, Reranker } from "../../services/Reranker.js"
import type { RerankFailure } from "../../services/Reranker.js"
import type { HoursWindow, Responder } from "../../services/ResponderRegistry.js"
import { ResponderRegistry, slaDefaults } from "../../services/ResponderRegistry.js"
import * as Cel from "../Cel.js"
import type * as Check from "./Check.js"
import * as Observed from "../internal/Observed.js"

/** A responder chosen for a query. */
export interface Candidate {
  readonly responder: Responder
  /** The predicate that matched it. */
  readonly predicate: Check.Responder
  /** Its position among the chosen, best first: the fold's responder index. */
  readonly index: number
  /** Its relevance score (the Reranker's scale). */
  readonly score: number
  /** How long to wait for it: the query's max_latency_secs, else its kind's default. */
  readonly maxLatencySecs: number
}

/** A candidate the hard filter dropped, and why. */
export interface Dropped {
  readonly responder: string
  readonly predicate: string
  readonly reason: string
}

export interface Selection {
  readonly candidates: ReadonlyArray<Candidate>
  readonly dropped: ReadonlyArray<Dropped>
  /** Fields of predicates no registered responder fits. */
  readonly unmatched: ReadonlyArray<string>
}

export interface Options {
  /** The query's text, what relevance ranks against; empty: match order is kept. */
  readonly query: string
  readonly topK: number
  readonly maxLatencySecs?: number | undefined
  /** A responder not seen for longer is dropped. Default 30 days. */
  readonly staleAfterSecs?: number | undefined
}

export const defaultStaleAfterSecs = 30 * 86_400

// ---------------------------------------------------------------------------
// Matching
// ---------------------------------------------------------------------------

/** Whether `responder` fits `predicate` (kind and name; the expression is the filter's). */
export const matches = (predicate: Check.Responder, responder: Responder): boolean => {
  const p = predicate.predicate
  switch (p.kind) {
    case "pattern":
      return responder.kind === "pattern" && Object.hasOwn(responder.capabilities, p.capability)
    case "system":
      return responder.kind === "system" && (p.name === undefined || p.name === responder.name) &&
        (p.capability === undefined || (responder.capabilities ?? []).includes(p.capability))
    case "llm":
      return responder.kind === "llm" && predicate.model === responder.model
    case "actor":
      return responder.kind === "actor" && p.did === responder.did
  }
}

/** A responder as CEL predicates see it. */
export const view = (responder: Responder): Cel.ResponderView => {
  const a = responder.availability ?? {}
  const availability: Record<string, unknown> = { status: a.status ?? "available" }
  availability.typical_response_delay_s = typicalDelay(responder)
  if (a.hours !== undefined) availability.hours = a.hours.map(describeWindow)
  if (a.lastSeenAt !== undefined) availability.last_seen_at = new Date(a.lastSeenAt)
  return new Cel.ResponderView(
    responder.id,
    responder.kind,
    responder.kind === "system" || responder.kind === "actor" ? responder.name ?? "" : "",
    responder.kind === "pattern" ? Object.keys(responder.capabilities) : responder.kind === "system" ? responder.capabilities ?? [] : [],
    responder.kind === "llm" ? responder.model : "",
    responder.kind === "actor" ? responder.did : "",
    responder.description ?? "",
    responder.tags ?? [],
    availability,
    responder.metadata ?? {}
  )
}

// ---------------------------------------------------------------------------
// The hard filter
// ---------------------------------------------------------------------------

const typicalDelay = (responder: Responder): number =>
  responder.availability?.typicalResponseDelaySecs ?? slaDefaults[responder.kind].typicalDelaySecs

const minutes = (hhmm: string): number => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5))

const describeWindow = (w: HoursWindow): string =>
  `${w.from}-${w.to} UTC${w.days === undefined ? "" : ` on days ${w.days.join(",")}`}`

/** Whether `now` (epoch ms) falls in the window; a window whose end is before its start runs past midnight. */
export const inWindow = (window: HoursWindow, now: number): boolean => {
  const date = new Date(now)
  const minute = date.getUTCHours() * 60 + date.getUTCMinutes()
  const from = minutes(window.from)
  const to = minutes(window.to)
  const day = date.getUTCDay()
  if (from <= to) return (window.days === undefined || window.days.includes(day)) && minute >= from && minute < to
  // overnight: the evening part belongs to today, the morning part to the day before
  if (minute >= from) return window.days === undefined || window.days.includes(day)
  return minute < to && (window.days === undefined || window.days.includes((day + 6) % 7))
}

/** Why the hard filter drops `responder` at `now`, or undefined when it passes (the CEL predicate apart). */
export const hardFilter = (
  responder: Responder,
  now: number,
  maxLatencySecs: number,
  staleAfterSecs: number = defaultStaleAfterSecs
): string | undefined => {
  const a = responder.availability ?? {}
  const status = a.status ?? "available"
  if (status !== "available") return `its status is ${status}`
  if (a.hours !== undefined && a.hours.length > 0 && !a.hours.some((w) => inWindow(w, now))) {
    return `it is outside its hours (${a.hours.map(describeWindow).join("; ")})`
  }
  const delay = typicalDelay(responder)
  if (delay > 0.5 * maxLatencySecs) {
    return `its typical response delay ${delay} s is more than half of max_latency_secs ${maxLatencySecs} s`
  }
  if (a.lastSeenAt !== undefined && now - a.lastSeenAt > staleAfterSecs * 1000) {
    return `it was last seen ${Math.floor((now - a.lastSeenAt) / 1000)} s ago (stale after ${staleAfterSecs} s)`
  }
  return undefined
}

/** The wait for a responder: the query's, else its kind's default. */
export const maxLatencyFor = (kind: ResponderKind, maxLatencySecs: number | undefined): number =>
  maxLatencySecs ?? slaDefaults[kind].maxLatencySecs

// ---------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------

/**
 * Matches, filters and ranks the registered responders for `predicates`, keeping
 * the best `topK`. Nothing left is ORCHESTRATION_NO_CONSENSUS with every reason; a
 * predicate expression that fails on a candidate is a typed OrchestrationFailure.
 */
export const select: (
  predicates: ReadonlyArray<Check.Responder>,
  options: Options
) => Effect.Effect<Selection, OrchestrationFailure | RerankFailure, ResponderRegistry | Reranker> = Observed.fn("Query.select")(
  function* (predicates: ReadonlyArray<Check.Responder>, options: Options) {
    const registry = yield* ResponderRegistry
    const all = yield* registry.responders
    const now = yield* Clock.currentTimeMillis
    const taken = new Set<string>()
    const survivors: Array<{ readonly responder: Responder; readonly predicate: Check.Responder; readonly maxLatencySecs: number }> = []
    const dropped: Array<Dropped> = []
    const unmatched: Array<string> = []
    for (const predicate of predicates) {
      let matched = 0
      for (const responder of all) {
        if (!matches(predicate, responder)) continue
        matched += 1
        if (taken.has(responder.id)) continue
        taken.add(responder.id)
        const maxLatencySecs = maxLatencyFor(responder.kind, options.maxLatencySecs)
        const reason = hardFilter(responder, now, maxLatencySecs, options.staleAfterSecs)
        if (reason !== undefined) {
          dropped.push({ responder: responder.id, predicate: predicate.field, reason })
          continue
        }
        if (predicate.expression !== undefined) {
          const wanted = predicate.expression.run({ responder: view(responder) })
          if (Either.isLeft(wanted)) return yield* wanted.left
          if (!wanted.right) {
            dropped.push({ responder: responder.id, predicate: predicate.field, reason: `${predicate.expression.field} is false` })
            continue
          }
        }
        survivors.push({ responder, predicate, maxLatencySecs })
      }
      if (matched === 0) unmatched.push(predicate.field)
    }
    if (survivors.length === 0) {
      const reasons = [
        ...dropped.map((d) => `${d.responder} (${d.predicate}): ${d.reason}`),
        ...unmatched.map((field) => `${field}: no registered responder fits ${describePredicate(predicates.find((p) => p.field === field))}`)
      ]
      return yield* OrchestrationFailure.noConsensus(`no responder survives the filter: ${reasons.slice(0, 16).join("; ")}`, {
        details: { dropped: dropped.slice(0, 64), unmatched }
      })
    }
    const ranked = options.query.trim().length === 0
      ? survivors.map((s, i) => ({ survivor: s, score: 0, i }))
      : yield* rank(options.query, survivors.map((s) => s.responder))
        .pipe(Effect.map((scored) => scored.map(({ i, score }) => ({ survivor: survivors[i]!, score, i }))))
    const candidates = ranked.slice(0, options.topK).map(({ score, survivor }, index): Candidate => ({ ...survivor, index, score }))
    return { candidates, dropped, unmatched }
  }
)

const describePredicate = (p: Check.Responder | undefined): string => {
  if (p === undefined) return "the predicate"
  const w = p.predicate
  switch (w.kind) {
    case "pattern":
      return `pattern with capability ${JSON.stringify(Text.excerpt(w.capability, 60))}`
    case "system":
      return `system${w.name === undefined ? "" : ` ${JSON.stringify(Text.excerpt(w.name, 60))}`}${w.capability === undefined ? "" : ` with capability ${JSON.stringify(Text.excerpt(w.capability, 60))}`}`
    case "llm":
      return `llm ${JSON.stringify(Text.excerpt(w.model, 60))}${p.model !== undefined && p.model !== w.model ? ` (${JSON.stringify(Text.excerpt(p.model, 60))})` : ""}`
    case "actor":
      return `actor ${JSON.stringify(Text.excerpt(w.did, 60))}`
  }
}

/** The responders' positions, best first, with their scores (the Reranker's order: score, then position). */
const rank = (query: string, responders: ReadonlyArray<Responder>) =>
  Effect.flatMap(Reranker, (reranker) => {
    // the passages and the input are built here from registered responders: not validated again (Construct)
    const passages = responders.map((r, i) =>
      Construct.unchecked(Passage, {
        content: [r.description ?? "", ...(r.tags ?? [])].join(" "),
        source: r.id,
        score: 0,
        metadata: { position: i }
      })
    )
    return Effect.map(
      reranker.rerank(Construct.unchecked(RerankInput, { query, candidates: passages })),
      (ranked) => ranked.map((p) => ({ i: p.metadata.position as number, score: p.score }))
    )
  })
