/**
 * Everyday reviews for the bundled model, in real vocabulary: polar adjectives,
 * verbs and nouns from AFINN-165/VADER (and WordNet neighbours), subjects from
 * WordNet's everyday nouns, in sentence shapes people write: complaints about
 * service, delays and breakage; praise of people and things; plain factual
 * statements (neutral); negation; contrast with "but" (one good and one bad
 * aspect is a mixed review, labelled neutral, as in the older templates);
 * intensifiers and downtoners; several sentences in one review.
 *
 * `makeRichReview(rng, "train")` draws only from the training split of the
 * lexicon; `makeUnseenReview(rng)` builds reviews whose polar words and subjects
 * all come from the held-out split (see lexicon.ts), in the shapes where those
 * words alone carry the sentiment.
 */
import type { LexSplit, Polarity, PolarVerb, PolarWord } from "./lexicon.js"
import { heldOutWordsIn, lexicon } from "./lexicon.js"
import type { Review, Rng, Sentiment } from "./tasks.js"
import { SUBJECTS_EVAL } from "./tasks.js"

// Every word written in the templates (this file and the older ones in tasks.ts)
// stays in the training split of the lexicon (lexicon.ts reads them).

const flip = (p: Polarity): Polarity => (p === "positive" ? "negative" : "positive")
const cap = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1)
const an = (w: string): string => (/^[aeiou]/.test(w) ? `an ${w}` : `a ${w}`)

// ---------------------------------------------------------------------------
// Curated pieces (training split)
// ---------------------------------------------------------------------------

const EVERYDAY_THINGS = [
  "app", "phone", "laptop", "printer", "charger", "router", "blender", "kettle", "heater", "washing machine",
  "car", "bike", "scooter", "headphones", "speaker", "camera", "watch", "mattress", "sofa", "desk chair",
  "room", "bathroom", "bed", "shower", "pool", "lobby", "kitchen", "balcony", "website", "order", "package",
  "delivery", "parcel", "flight", "train", "bus", "ferry", "taxi", "hotel", "hostel", "apartment", "cabin",
  "restaurant", "bakery", "bar", "pub", "shop", "pharmacy", "garage", "salon", "clinic", "concert", "match",
  "museum", "exhibition", "tour", "class", "course", "lecture", "book", "album", "game", "update", "software"
]
const EVERYDAY_FOOD = [
  "soup", "pizza", "burger", "steak", "salad", "coffee", "tea", "bread", "cake", "pie", "fries", "rice",
  "noodle soup", "fish", "chicken", "omelette", "pancakes", "ice cream", "wine", "beer", "dessert", "breakfast"
]
const EVERYDAY_PEOPLE = [
  "waiter", "waitress", "staff", "host", "guide", "driver", "receptionist", "doctor", "nurse", "teacher",
  "mechanic", "plumber", "electrician", "cashier", "manager", "chef", "barista", "seller", "landlord",
  "support team", "customer service", "agent", "instructor", "coach", "tour guide", "hairdresser", "courier"
]
const DETS = ["the", "the", "the", "the", "our", "my", "this", "that"]
const PEOPLE_DETS = ["the", "the", "the", "our", "my"]

const INTENSIFIERS = [
  "", "", "", "", "", "very ", "really ", "so ", "extremely ", "incredibly ", "truly ", "absolutely ", "super ",
  "quite ", "pretty ", "rather ", "a bit ", "somewhat ", "slightly ", "just ", "genuinely ", "totally "
]
const NOUN_INTENSIFIERS = ["", "", "real ", "total ", "complete ", "absolute ", "bit of a "]

const MINUTES = ["ten", "fifteen", "twenty", "thirty", "forty", "forty-five", "ninety", "10", "20", "25", "35", "50"]
const PERIODS = ["two days", "a week", "three weeks", "a month", "two months", "one use", "a few hours", "the first wash", "a year"]
const DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
const COLORS = ["red", "blue", "green", "black", "white", "grey", "yellow", "brown", "silver", "orange", "purple"]
const MATERIALS = ["wood", "metal", "plastic", "glass", "cotton", "steel", "leather", "wool", "aluminium"]
const PARTS = ["buttons", "rooms", "pages", "chapters", "tracks", "drawers", "pockets", "settings", "floors", "seats"]
const UNITS = ["dollars", "euros", "pounds"]
const TOPICS = ["the old town", "the history of the place", "local wine", "the castle", "the birds", "the city", "cars", "the menu", "the software", "the area"]

const NEGATIVE_SERVICE: ReadonlyArray<(s: () => string, p: () => string) => string> = [
  (s) => `We waited ${pick(MINUTES)} minutes for ${s()}.`,
  (_s, p) => `${cap(p())} ignored us for ${pick(MINUTES)} minutes.`,
  (s) => `${cap(s())} arrived ${pick(["two", "three", "five", "ten"])} days late.`,
  (s) => `${cap(s())} was ${pick(["an hour", "two hours", "forty minutes", "half a day"])} late.`,
  (s) => `${cap(s())} stopped working after ${pick(PERIODS)}.`,
  (s) => `${cap(s())} broke after ${pick(PERIODS)}.`,
  (s) => `${cap(s())} keeps ${pick(["crashing", "freezing", "shutting down", "losing my data", "disconnecting", "logging me out"])}.`,
  (_s, p) => `${cap(p())} never ${pick(["answers", "replies", "called back", "answered my emails", "showed up", "returned my calls"])}.`,
  (_s, p) => `Nobody ${pick(["answered the phone", "helped us", "said hello", "came to our table", "replied to my emails"])}.`,
  (s) => `I had to ask ${pick(["twice", "three times", "four times"])} for ${s()}.`,
  (_s, p) => `${cap(p())} forgot our order.`,
  (_s, p) => `${cap(p())} charged us twice.`,
  (s) => `${cap(s())} was ${pick(["missing", "damaged", "cracked", "scratched", "leaking", "stained"])} when it arrived.`,
  (s) => `${cap(s())} was cold when it arrived.`,
  (s) => `${cap(s())} smelled of ${pick(["smoke", "mold", "sewage", "old fish"])}.`,
  (s) => `${cap(s())} was cancelled ${pick(["twice", "at the last minute", "without notice"])}.`,
  (s) => `${cap(s())} took ${pick(["forever", "three hours", "two weeks", "a month"])} to arrive.`,
  (s) => `Half of ${s()} was missing.`,
  (s) => `${cap(s())} does not work.`,
  (s) => `${cap(s())} doesn't work at all.`,
  (_s, p) => `${cap(p())} was rude to us.`,
  (_s, p) => `${cap(p())} lost my ${pick(["luggage", "booking", "order", "keys", "file"])}.`,
  (s) => `I asked for a refund for ${s()}.`,
  (s) => `We sent ${s()} back.`,
  (s) => `${cap(s())} fell apart after ${pick(PERIODS)}.`,
  (s) => `${cap(s())} was dirty and smelled bad.`,
  (s) => `There was a hair in ${s()}.`,
  (s) => `${cap(s())} was overpriced and tasteless.`,
  (s) => `It took them ${pick(["an hour", "three weeks", "forever"])} to fix ${s()}.`
]

const POSITIVE_SERVICE: ReadonlyArray<(s: () => string, p: () => string) => string> = [
  (_s, p) => `${cap(p())} knew everything about ${pick(TOPICS)}.`,
  (_s, p) => `${cap(p())} went out of ${pick(["their", "her", "his"])} way to help us.`,
  (_s, p) => `${cap(p())} remembered our names.`,
  (_s, p) => `${cap(p())} made us laugh the whole time.`,
  (_s, p) => `${cap(p())} fixed ${pick(["my problem", "the leak", "the car", "everything"])} in ${pick(MINUTES)} minutes.`,
  (_s, p) => `${cap(p())} answered all our questions.`,
  (_s, p) => `${cap(p())} was kind and patient with the kids.`,
  (s) => `${cap(s())} arrived a day early.`,
  (s) => `${cap(s())} still works after ${pick(["five years", "ten years", "years of use", "two years"])}.`,
  (s) => `${cap(s())} was worth every penny.`,
  (s) => `${cap(s())} works like a charm.`,
  (s) => `${cap(s())} melted in my mouth.`,
  (s) => `Everything about ${s()} was just right.`,
  (s) => `We will definitely come back for ${s()}.`,
  (s) => `I would buy ${s()} again in a heartbeat.`,
  (s) => `${cap(s())} exceeded our expectations.`,
  (s) => `${cap(s())} was ready in ${pick(["five", "ten", "two"])} minutes and tasted great.`,
  (s) => `${cap(s())} was spotless and the bed was comfy.`,
  (_s, p) => `${cap(p())} gave us a free ${pick(["dessert", "upgrade", "drink", "coffee"])}.`,
  (s) => `My kids loved ${s()}.`
]

const FACTS: ReadonlyArray<(s: () => string) => string> = [
  () => `The ${pick(["train", "bus", "flight", "ferry"])} left at ${int(5, 12)} and arrived at ${int(1, 11)}.`,
  (s) => `${cap(s())} arrived on ${pick(DAYS)}.`,
  (s) => `I ordered ${s()} on ${pick(DAYS)} and it came on ${pick(DAYS)}.`,
  (s) => `${cap(s())} is ${pick(COLORS)}.`,
  (s) => `${cap(s())} comes in ${pick(COLORS)} and ${pick(COLORS)}.`,
  (s) => `${cap(s())} costs ${int(2, 900)} ${pick(UNITS)}.`,
  (s) => `We paid ${int(2, 400)} ${pick(UNITS)} for ${s()}.`,
  (s) => `${cap(s())} is made of ${pick(MATERIALS)}.`,
  () => `The ${pick(["shop", "museum", "pharmacy", "bakery", "office", "library"])} opens at ${int(6, 10)} and closes at ${int(4, 9)}.`,
  (s) => `${cap(s())} has ${int(2, 12)} ${pick(PARTS)}.`,
  () => `We stayed for ${pick(["two", "three", "four", "five", "seven"])} nights.`,
  (s) => `${cap(s())} is ${int(40, 180)} minutes long.`,
  () => `The box contained ${int(2, 12)} ${pick(PARTS)}.`,
  (s) => `I used ${s()} ${pick(["twice", "three times", "once", "every day"])} last week.`,
  (s) => `${cap(s())} is on the ${pick(["first", "second", "third", "fourth"])} floor.`,
  () => `It is ${int(2, 30)} minutes from the ${pick(["station", "airport", "beach", "centre"])}.`,
  () => `The package weighed ${int(1, 20)} kilos.`,
  (s) => `${cap(s())} was delivered on ${pick(DAYS)} at ${int(1, 11)}.`,
  (s) => `We went to ${s()} on ${pick(DAYS)}.`,
  (s) => `${cap(s())} uses ${pick(["two", "four", "six"])} batteries.`,
  () => `I read it in ${pick(["two", "three", "five"])} days.`,
  (s) => `My ${pick(["sister", "brother", "friend", "neighbor", "son", "daughter"])} bought ${s()} in ${pick(["May", "June", "March", "October"])}.`,
  (s) => `${cap(s())} replaced the old one.`,
  (s) => `${cap(s())} was ${pick(["moved", "renamed", "repainted", "rebuilt"])} in ${int(1990, 2023)}.`,
  () => `The menu has ${int(5, 40)} dishes.`,
  () => `We took the ${int(6, 11)} o'clock ${pick(["train", "bus", "boat"])}.`,
  (s) => `${cap(s())} is next to the ${pick(["station", "bank", "park", "church", "market"])}.`,
  () => `There were ${int(3, 60)} people in the room.`,
  (s) => `${cap(s())} runs on ${pick(["gas", "electricity", "batteries", "solar power"])}.`
]

const CLOSING: Record<Polarity, ReadonlyArray<string>> = {
  positive: ["Will definitely come back.", "Highly recommend.", "Worth every penny.", "Can't wait to go back.", "Five stars.", "Would recommend it to anyone.", "Thank you!", "We will be back."],
  negative: ["Would not go back.", "Waste of money.", "Stay away.", "Never again.", "One star.", "Do not buy it.", "Avoid.", "I want my money back."]
}

const NEUTRAL_WORDS = ["okay", "fine", "average", "ordinary", "alright", "standard", "decent enough", "as described", "as expected"]

// ---------------------------------------------------------------------------
// Drawing
// ---------------------------------------------------------------------------

let current: Rng
const pick = <T>(xs: ReadonlyArray<T>): T => current.pick(xs)
const int = (lo: number, hi: number): number => current.int(lo, hi)

const heldOutSubjects = new Set(SUBJECTS_EVAL.map((s) => s.split(" ").slice(1).join(" ")))

interface Pools {
  readonly adj: Record<Polarity, ReadonlyArray<PolarWord>>
  readonly verb: Record<Polarity, ReadonlyArray<PolarVerb>>
  readonly noun: Record<Polarity, ReadonlyArray<PolarWord>>
  readonly things: ReadonlyArray<string>
  readonly people: ReadonlyArray<string>
}

const pools: Partial<Record<LexSplit, Pools>> = {}
const poolsOf = (split: LexSplit): Pools => {
  const cached = pools[split]
  if (cached !== undefined) return cached
  const lex = lexicon()
  const byPol = <A extends { readonly polarity: Polarity }>(xs: ReadonlyArray<A>): Record<Polarity, ReadonlyArray<A>> => ({
    positive: xs.filter((x) => x.polarity === "positive"),
    negative: xs.filter((x) => x.polarity === "negative")
  })
  const notHeld = (w: string) => !heldOutSubjects.has(w)
  const made: Pools = {
    adj: byPol(lex.adjectives[split]),
    verb: byPol(lex.verbs[split]),
    noun: byPol(lex.nouns[split]),
    things: [...lex.things[split], ...lex.food[split], ...lex.places[split]].filter(notHeld),
    people: lex.people[split].filter(notHeld)
  }
  pools[split] = made
  return made
}

const subject = (p: Pools, split: LexSplit): string => {
  const curated = split === "train" && current.chance(0.55)
  const noun = curated ? pick(current.chance(0.7) ? EVERYDAY_THINGS : EVERYDAY_FOOD) : pick(p.things)
  return `${pick(DETS)} ${noun}`
}
const person = (p: Pools, split: LexSplit): string => {
  const curated = split === "train" && current.chance(0.6)
  return `${pick(PEOPLE_DETS)} ${curated ? pick(EVERYDAY_PEOPLE) : pick(p.people)}`
}

type Clause = (pol: Polarity) => string

/** Clauses whose sentiment is carried by one lexicon word. */
const lexClauses = (p: Pools, split: LexSplit): ReadonlyArray<Clause> => {
  const be = () => (current.chance(0.75) ? "was" : "is")
  const adj = (pol: Polarity) => pick(p.adj[pol]).word
  const S = () => (current.chance(0.3) ? person(p, split) : subject(p, split))
  return [
    (pol) => `${cap(S())} ${be()} ${pick(INTENSIFIERS)}${adj(pol)}.`,
    (pol) => `${cap(S())} ${be()} ${pick(INTENSIFIERS)}${adj(pol)}.`,
    (pol) => `${cap(S())} ${pick(["looked", "felt", "seemed", "sounded", "tasted"])} ${pick(INTENSIFIERS)}${adj(pol)}.`,
    (pol) => `${cap(S())} ${be()} ${adj(pol)} and ${adj(pol)}.`,
    (pol) => `${cap(person(p, split))} ${be()} ${pick(INTENSIFIERS)}${adj(pol)} and ${pick(INTENSIFIERS)}${adj(pol)}.`,
    (pol) => `${cap(pick(["what", "such"]))} ${an(adj(pol))} ${S().split(" ").slice(1).join(" ")}${pick(["!", "."])}`,
    (pol) => `${cap(adj(pol))}${pick(["!", ".", ", really."])}`,
    (pol) => `${cap(person(p, split))} ${pick(p.verb[pol]).past} us.`,
    (pol) => `${cap(person(p, split))} ${pick(p.verb[pol]).past} ${pick(["everyone", "me", "the guests", "my family"])}.`,
    (pol) => `I ${pick(p.verb[pol]).past} ${pick(["every minute of it", "it", S()])}.`,
    (pol) => `We ${pick(p.verb[pol]).past} ${S()}.`,
    (pol) => `${cap(S())} ${pick(p.verb[pol]).presentS} ${pick(["us", "me", "everyone"])} every time.`,
    (pol) => `It was ${an(pick(NOUN_INTENSIFIERS) + pick(p.noun[pol]).word)}.`,
    (pol) => `${cap(S())} was ${an(pick(NOUN_INTENSIFIERS) + pick(p.noun[pol]).word)}.`,
    (pol) => `What ${an(pick(p.noun[pol]).word)}!`,
    (pol) => `${cap(an(pick(p.noun[pol]).word))} from start to finish.`
  ]
}

/** Negated clauses: the sentiment is the opposite of the word's. */
const negatedClauses = (p: Pools, split: LexSplit): ReadonlyArray<Clause> => {
  const adj = (pol: Polarity) => pick(p.adj[pol]).word
  const S = () => (current.chance(0.3) ? person(p, split) : subject(p, split))
  return [
    (pol) => `${cap(S())} ${pick(["was not", "wasn't", "is not", "isn't", "was never"])} ${adj(flip(pol))}${pick(["", "", " at all"])}.`,
    (pol) => `${cap(S())} ${pick(["was not", "wasn't"])} ${pick(["very", "particularly", "exactly", "really"])} ${adj(flip(pol))}.`,
    (pol) => `Nothing about ${S()} was ${adj(flip(pol))}.`,
    (pol) => `I ${pick(["can't", "cannot", "wouldn't"])} say ${S()} was ${adj(flip(pol))}.`,
    (pol) => `${cap(person(p, split))} ${pick(["did not", "didn't", "never"])} ${pick(p.verb[flip(pol)]).base} us.`,
    (pol) => `Not ${adj(flip(pol))} at all.`
  ]
}

const curatedClause = (pol: Polarity, p: Pools): string => {
  const s = () => subject(p, "train")
  const pe = () => person(p, "train")
  return pick(pol === "positive" ? POSITIVE_SERVICE : NEGATIVE_SERVICE)(s, pe)
}

const factSentence = (p: Pools, split: LexSplit): string => pick(FACTS)(() => subject(p, split))

const finish = (text: string): string => (current.chance(0.08) ? text.toLowerCase() : text)

/** A review of the training split. */
export const makeRichReview = (rng: Rng): Review => {
  current = rng
  const p = poolsOf("train")
  const lex = lexClauses(p, "train")
  const neg = negatedClauses(p, "train")
  const polar = (pol: Polarity): string => {
    const r = rng.next()
    return r < 0.45 ? pick(lex)(pol) : r < 0.65 ? pick(neg)(pol) : curatedClause(pol, p)
  }
  const pol: Polarity = rng.chance(0.5) ? "positive" : "negative"
  const kind = rng.next()
  let parts: Array<string>
  let label: Sentiment
  if (kind < 0.3) {
    parts = [polar(pol)]
    label = pol
  } else if (kind < 0.5) {
    // several sentences that agree, maybe a fact for context and a closing line
    parts = [polar(pol), polar(pol)]
    if (rng.chance(0.4)) parts.unshift(factSentence(p, "train"))
    if (rng.chance(0.4)) parts.push(pick(CLOSING[pol]))
    label = pol
  } else if (kind < 0.62) {
    // "but" between a fact and an opinion: the opinion decides
    const fact = factSentence(p, "train").replace(/\.$/, "")
    const opinion = polar(pol)
    parts = [`${fact}, but ${opinion.charAt(0).toLowerCase()}${opinion.slice(1)}`]
    label = pol
  } else if (kind < 0.75) {
    // mixed: one good and one bad aspect
    const a = polar(pol)
    const b = polar(flip(pol))
    parts = rng.chance(0.6)
      ? [`${a.replace(/[.!]$/, "")}, ${pick(["but", "but", "although", "while", "yet"])} ${b.charAt(0).toLowerCase()}${b.slice(1)}`]
      : [a, `${pick(["But", "On the other hand,", "However,"])} ${b.charAt(0).toLowerCase()}${b.slice(1)}`]
    label = "neutral"
  } else if (kind < 0.93) {
    // plain facts
    parts = [factSentence(p, "train")]
    if (rng.chance(0.5)) parts.push(factSentence(p, "train"))
    label = "neutral"
  } else {
    const n = pick(NEUTRAL_WORDS)
    parts = [rng.chance(0.5) ? `${cap(subject(p, "train"))} was ${n}.` : `${cap(subject(p, "train"))} was ${n}, nothing special.`]
    if (rng.chance(0.5)) parts.unshift(factSentence(p, "train"))
    label = "neutral"
  }
  return { review: finish(parts.join(" ")), label }
}

/**
 * A review made only of held-out words (polar words and subjects of the
 * lexicon's eval split), in the shapes where that word alone carries the
 * sentiment; a quarter are plain facts about held-out subjects (neutral).
 */
export const makeUnseenReview = (rng: Rng): Review => {
  current = rng
  const p = poolsOf("eval")
  const lex = lexClauses(p, "eval")
  const neg = negatedClauses(p, "eval")
  const pol: Polarity = rng.chance(0.5) ? "positive" : "negative"
  const r = rng.next()
  if (r < 0.55) return { review: pick(lex)(pol), label: pol }
  if (r < 0.75) return { review: pick(neg)(pol), label: pol }
  for (;;) {
    // a fact about a held-out subject (facts without a subject slot test nothing unseen)
    const fact = factSentence(p, "eval")
    if (heldOutWordsIn(fact).length > 0) return { review: fact, label: "neutral" }
  }
}
