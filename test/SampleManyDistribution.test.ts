/**
 * The statistical test of LlamaEngine.sampleMany on the bundled model: its
 * samples are distributed like independent `infer` calls.
 *
 * For a fixed set of reviews the model is split on at temperature 2, the label
 * of each sample (read from the first tokens of the constrained answer: maxTokens
 * 5 reaches the label's first token) is counted for two arms: `sampleMany` in
 * draws of 6, and single `infer` calls. A chi-square test of homogeneity (one
 * 2 x k table per review, statistics and degrees of freedom summed) must accept
 * at p > 0.01. The same test must reject (p < 0.01) a deliberately biased
 * sampler: the same tree whose uniform stream is bent (u^1.25, which moves the
 * draws towards the most likely token by about 5 points on a 50/50 review).
 *
 * Power: SAMPLES = 2,500 draws per review and arm over the 4 reviews (their
 * measured splits are about 55/45, 53/47, 47/53 and 73/27). By simulation of
 * this summed test at the 0.01 level (400 simulated runs each), a shift of every
 * review's label share by 3 points is detected with power 0.90 (1,000 per arm
 * gave 0.38), by 5 points with about 1; with no shift it rejects 1% of the time,
 * as it should. The test takes about 50 s on a quiet 2-core machine (20,000
 * constrained samples of 5 tokens). The biased sampler moves the shares by 4 to
 * 9 points.
 * Seeds are fixed, so a run is reproducible, not a coin toss per CI run.
 */
import { describe, expect, it, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Message from "../src/domain/Message.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { uniform } from "../src/layers/llama/TreeSampler.js"
import * as Engine from "../src/services/Engine.js"

const SAMPLES = Number(process.env["SAMPLE_MANY_SAMPLES"] ?? 2500)
const DRAW = 6
const REVIEWS = ["Hmm.", "Not bad at all, I would come back.", "The room was small.", "ok"]

const SENTIMENT = {
  type: "object",
  properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
  required: ["sentiment"]
} as const

const ask = (review: string, seed: number) =>
  new Engine.InferenceRequest({
    messages: [Message.system("Classify the sentiment of the review."), Message.user(review)],
    schema: SENTIMENT as never,
    maxTokens: 5,
    temperature: 2,
    seed
  })

/** The label an answer starts: its first three letters after `"sentiment": "`. */
const labelOf = (outcome: Either.Either<Engine.InferenceResult, unknown>): string => {
  if (Either.isLeft(outcome)) return "failed"
  const match = /"sentiment":\s*"([a-z]{0,3})/.exec(outcome.right.content)
  return match?.[1] ?? "other"
}

type Counts = Map<string, number>
const tally = (labels: ReadonlyArray<string>): Counts => {
  const counts: Counts = new Map()
  for (const label of labels) counts.set(label, (counts.get(label) ?? 0) + 1)
  return counts
}

// ---------------------------------------------------------------------------
// Chi-square
// ---------------------------------------------------------------------------

/** ln Γ(x) (Lanczos). */
const logGamma = (x: number): number => {
  const g = [76.18009172947146, -86.50532032941677, 24.01409824083091, -1.231739572450155, 0.1208650973866179e-2, -0.5395239384953e-5]
  let y = x
  const tmp = x + 5.5 - (x + 0.5) * Math.log(x + 5.5)
  let ser = 1.000000000190015
  for (const c of g) ser += c / ++y
  return -tmp + Math.log((2.5066282746310005 * ser) / x)
}

/** The regularized upper incomplete gamma Q(a, x) (series below a + 1, continued fraction above). */
const gammaQ = (a: number, x: number): number => {
  if (x <= 0) return 1
  if (x < a + 1) {
    let sum = 1 / a
    let term = sum
    for (let n = 1; n < 500; n++) {
      term *= x / (a + n)
      sum += term
      if (Math.abs(term) < Math.abs(sum) * 1e-14) break
    }
    return 1 - sum * Math.exp(-x + a * Math.log(x) - logGamma(a))
  }
  let b = x + 1 - a
  let c = 1 / 1e-300
  let d = 1 / b
  let h = d
  for (let i = 1; i < 500; i++) {
    const an = -i * (i - a)
    b += 2
    d = an * d + b
    if (Math.abs(d) < 1e-300) d = 1e-300
    c = b + an / c
    if (Math.abs(c) < 1e-300) c = 1e-300
    d = 1 / d
    const delta = d * c
    h *= delta
    if (Math.abs(delta - 1) < 1e-14) break
  }
  return Math.exp(-x + a * Math.log(x) - logGamma(a)) * h
}

/** The chi-square p-value of `statistic` on `df` degrees of freedom. */
const chiSquareP = (statistic: number, df: number): number => (df <= 0 ? 1 : gammaQ(df / 2, statistic / 2))

/** Homogeneity of two arms' label counts: the statistic and degrees of freedom of their 2 x k table. */
const homogeneity = (a: Counts, b: Counts) => {
  const labels = [...new Set([...a.keys(), ...b.keys()])]
  const na = [...a.values()].reduce((x, y) => x + y, 0)
  const nb = [...b.values()].reduce((x, y) => x + y, 0)
  let statistic = 0
  for (const label of labels) {
    const oa = a.get(label) ?? 0
    const ob = b.get(label) ?? 0
    const ea = ((oa + ob) * na) / (na + nb)
    const eb = ((oa + ob) * nb) / (na + nb)
    statistic += (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb
  }
  return { statistic, df: labels.length - 1 }
}

/** The summed test over the reviews: p-value, statistic, degrees of freedom. */
const test = (a: ReadonlyArray<Counts>, b: ReadonlyArray<Counts>) => {
  const parts = a.map((counts, i) => homogeneity(counts, b[i]!))
  const statistic = parts.reduce((s, p) => s + p.statistic, 0)
  const df = parts.reduce((s, p) => s + p.df, 0)
  return { p: chiSquareP(statistic, df), statistic, df }
}

// ---------------------------------------------------------------------------
// The arms
// ---------------------------------------------------------------------------

/** SAMPLES labels of `review` by sampleMany in draws of DRAW, seeds from `base`. */
const treeArm = (engine: Engine.Service, review: string, base: number) =>
  Effect.map(
    Effect.forEach(
      Array.from({ length: Math.ceil(SAMPLES / DRAW) }, (_, k) => k),
      (k) => Engine.sampleMany(engine, ask(review, base + k * DRAW), DRAW),
      { concurrency: 1 }
    ),
    (draws) => tally(draws.flat().slice(0, SAMPLES).map(labelOf))
  )

/** SAMPLES labels of `review` by single infer calls (DRAW at once), seeds from `base`. */
const inferArm = (engine: Engine.Service, review: string, base: number) =>
  Effect.map(
    Effect.forEach(
      Array.from({ length: SAMPLES }, (_, i) => i),
      (i) => Effect.either(engine.infer(ask(review, base + i))),
      { concurrency: DRAW }
    ),
    (outcomes) => tally(outcomes.map(labelOf))
  )

/** The biased sampler: the tree with every uniform draw bent towards 0 (the most likely token first). */
const bent = (seed: number) => {
  const u = uniform(seed)
  return () => u() ** 1.25
}

const show = (counts: ReadonlyArray<Counts>) => counts.map((c) => Object.fromEntries([...c].sort()))

/** A second engine on the bundled model whose sampleMany uses the biased stream. */
class BiasedEngine extends Context.Tag("test/BiasedEngine")<BiasedEngine, Engine.Service>() {}

describe("chi-square p-values", () => {
  it("match the table: 13.277 on 4 df is 0.01, 3.841 on 1 df is 0.05, 0 is 1", () => {
    expect(chiSquareP(13.2767, 4)).toBeCloseTo(0.01, 4)
    expect(chiSquareP(3.8415, 1)).toBeCloseTo(0.05, 4)
    expect(chiSquareP(31.4104, 20)).toBeCloseTo(0.05, 4)
    expect(chiSquareP(0, 3)).toBe(1)
  })
})

layer(
  Layer.mergeAll(
    LlamaEngine.layer({ sequences: DRAW }),
    Layer.scoped(BiasedEngine, LlamaEngine.make({ sequences: DRAW, sampleRandom: bent }))
  ),
  { excludeTestServices: true }
)("sampleMany is distributed like independent infers (chi-square)", (it) => {
  it.effect(
    `${SAMPLES} samples per arm on each of ${REVIEWS.length} reviews: tree vs infer accepted at p > 0.01; a biased tree rejected at p < 0.01`,
    () =>
      Effect.gen(function*() {
        const engine = yield* Engine.Engine
        const biased = yield* BiasedEngine
        const started = performance.now()
        const infer = yield* Effect.forEach(REVIEWS, (review) => inferArm(engine, review, 1_000_000))
        const tree = yield* Effect.forEach(REVIEWS, (review) => treeArm(engine, review, 2_000_000))
        const skewed = yield* Effect.forEach(REVIEWS, (review) => treeArm(biased, review, 3_000_000))
        const same = test(tree, infer)
        const off = test(skewed, infer)
        console.log(JSON.stringify({
          seconds: ((performance.now() - started) / 1000).toFixed(1),
          infer: show(infer),
          tree: show(tree),
          biased: show(skewed),
          treeVsInfer: same,
          biasedVsInfer: off
        }))
        // every sample reached its label
        for (const counts of [...infer, ...tree]) expect([...counts.keys()].every((l) => ["pos", "neg", "neu"].includes(l))).toBe(true)
        expect(same.p).toBeGreaterThan(0.01)
        expect(off.p).toBeLessThan(0.01)
      }),
    600_000
  )
})
