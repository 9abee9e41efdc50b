/**
 * Synthetic tasks of the bundled model: sentiment classification, arithmetic
 * through the calculator tool, and short chat turns.
 *
 * Everything is deterministic given a seed. Training and held-out evaluation use
 * disjoint subjects/fillers for reviews and disjoint operand pairs for arithmetic.
 */
import type { ChatHistoryItem, ChatModelFunctions, ChatModelResponse } from "node-llama-cpp"
import { LlamaText } from "node-llama-cpp"
import { BUNDLED_CALCULATOR_TOOL } from "../src/layers/llama/PaganticChatWrapper.js"
import { heldOutWordsIn } from "./lexicon.js"

export type Split = "train" | "eval"

// ---------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------

export class Rng {
  private state: number
  constructor(seed: number) {
    this.state = seed >>> 0
  }
  next(): number {
    let t = (this.state += 0x6d2b79f5)
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1))
  }
  pick<T>(xs: ReadonlyArray<T>): T {
    return xs[Math.floor(this.next() * xs.length)]!
  }
  chance(p: number): boolean {
    return this.next() < p
  }
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

export const calculatorFunctions: ChatModelFunctions = {
  [BUNDLED_CALCULATOR_TOOL.name]: {
    description: BUNDLED_CALCULATOR_TOOL.description,
    params: BUNDLED_CALCULATOR_TOOL.parameters
  }
}

/** The reference calculator: `+ - * /` with parentheses; the result is formatted like src/layers/tools/Calculator.ts (`format`: integers as is, else at most 6 decimals). */
export const evaluateExpression = (expression: string): string => {
  if (!/^[0-9+\-*/(). ]+$/.test(expression)) throw new Error(`bad expression: ${expression}`)
  // eslint-disable-next-line @typescript-eslint/no-implied-eval
  const value = Function(`"use strict"; return (${expression});`)() as number
  if (!Number.isFinite(value)) return "undefined"
  return String(Number.isInteger(value) ? value : Number(value.toFixed(6)))
}

// ---------------------------------------------------------------------------
// Sentiment
// ---------------------------------------------------------------------------

export type Sentiment = "positive" | "negative" | "neutral"

const POS = [
  "great", "excellent", "amazing", "wonderful", "fantastic", "good", "superb", "delightful",
  "lovely", "brilliant", "enjoyable", "outstanding", "perfect", "impressive", "pleasant",
  "terrific", "awesome", "charming", "fun", "nice", "beautiful", "helpful", "fresh", "tasty",
  "comfortable", "reliable", "fast", "friendly", "incredible", "solid", "delicious", "spotless",
  "clean", "cozy", "generous", "attentive", "gorgeous", "stunning", "smooth", "polite", "affordable",
  "spacious", "welcoming", "professional", "flawless", "fabulous", "marvelous", "cheerful", "elegant"
]
const NEG = [
  "terrible", "awful", "horrible", "bad", "poor", "disappointing", "boring", "dreadful",
  "useless", "annoying", "broken", "bland", "disgusting", "frustrating", "painful", "weak",
  "lousy", "unpleasant", "rude", "slow", "dirty", "cheap", "ugly", "noisy", "overpriced",
  "mediocre", "stale", "buggy", "unreliable", "awkward", "cold", "greasy", "cramped", "filthy",
  "tasteless", "soggy", "late", "flimsy", "smelly", "unhelpful", "crowded", "confusing", "defective",
  "overcooked", "burnt", "outdated", "uncomfortable", "dull", "clumsy", "pathetic"
]
const NEU = ["okay", "fine", "average", "ordinary", "acceptable", "so-so", "unremarkable", "standard", "alright", "typical"]

const INTENS = ["", "", "", "really ", "very ", "absolutely ", "quite ", "pretty ", "so ", "truly ", "extremely "]

export const SUBJECTS_EVAL = [
  "the film", "this tablet", "the pasta", "the resort", "the support team", "the novel", "the monitor",
  "the festival", "the meal", "the waiter", "the website", "the puzzle", "the speakers", "the cafe",
  "the series", "the workshop", "the bike", "the tea", "the apartment", "the charger", "the lens",
  "the shipping", "the noodles", "the podcast", "the finale", "the story", "the mouse", "the gallery"
]
const FILLERS_EVAL = [
  "I got it as a gift.", "We were there in July.", "A friend told me about it.",
  "I have had it for two weeks.", "We stopped by after work."
]

// Training subjects: many nouns (none of the eval ones) and made-up words, so that
// the model learns that the subject carries no sentiment.
const NOUNS_TRAIN = [
  "movie", "phone", "pizza", "hotel", "service", "book", "laptop", "concert", "food", "staff", "app",
  "game", "headphones", "restaurant", "show", "course", "car", "coffee", "room", "battery", "camera",
  "delivery", "soup", "album", "ending", "plot", "keyboard", "museum", "beach", "flight", "seller",
  "tour", "sequel", "burger", "shoes", "printer", "update", "gym", "salad", "teacher", "jacket",
  "dress", "sofa", "mattress", "vacuum", "blender", "kettle", "watch", "backpack", "tent", "guitar",
  "piano", "lesson", "class", "doctor", "dentist", "barber", "bakery", "bread", "cake", "sandwich",
  "steak", "sushi", "curry", "wine", "beer", "juice", "dessert", "breakfast", "lunch", "dinner",
  "buffet", "menu", "price", "parking", "train", "bus", "taxi", "driver", "airline", "airport",
  "lobby", "pool", "spa", "view", "garden", "park", "zoo", "theater", "play", "musical", "band",
  "singer", "actor", "director", "script", "soundtrack", "trailer", "episode", "season", "documentary",
  "cartoon", "comic", "magazine", "newspaper", "article", "blog", "video", "stream", "software",
  "browser", "router", "television", "screen", "tablet case", "smartwatch", "drone", "console",
  "controller", "toy", "puzzle box", "board game", "recipe", "cookbook", "perfume", "shampoo", "soap",
  "cream", "lamp", "chair", "desk", "table", "fridge", "oven", "microwave", "heater", "fan", "umbrella",
  "store", "shop", "market", "mall", "bank", "library", "school", "university", "hospital", "clinic",
  "landlord", "neighbor", "plumber", "mechanic", "guide", "host", "chef", "manager", "team", "crew",
  "product", "purchase", "order", "package", "experience", "trip", "holiday", "visit", "stay", "event"
]
const DETS = ["the", "the", "the", "this", "my", "our", "that", "their"]
const SYLLABLES = ["ba", "ko", "zu", "mi", "ra", "to", "ne", "fli", "gor", "ste", "pa", "lu", "ven", "dri", "sa", "qui", "mo", "tex", "bel", "orn"]

type Subject = { readonly det: string; readonly noun: string }
const subjectText = (s: Subject): string => `${s.det} ${s.noun}`

/** A made-up word; never one that happens to be a word of the lexicon's held-out split. */
const pseudoWord = (rng: Rng): string => {
  for (;;) {
    let w = ""
    const n = rng.int(2, 3)
    for (let i = 0; i < n; i++) w += rng.pick(SYLLABLES)
    if (heldOutWordsIn(w).length === 0) return w
  }
}

const pickSubject = (rng: Rng, split: Split): Subject => {
  if (split === "eval") {
    const [det, ...rest] = rng.pick(SUBJECTS_EVAL).split(" ")
    return { det: det!, noun: rest.join(" ") }
  }
  const noun = rng.chance(0.25) ? pseudoWord(rng) : rng.pick(NOUNS_TRAIN)
  return { det: rng.pick(DETS), noun }
}

const TIMES = ["last week", "yesterday", "in March", "on Sunday", "last summer", "in the morning", "two days ago", "last night", "on my birthday", "in December"]
const PEOPLE = ["My sister", "My brother", "A coworker", "My neighbor", "My mom", "My friend", "Someone online", "My partner"]
const pickFiller = (rng: Rng, split: Split): string => {
  if (split === "eval") return rng.pick(FILLERS_EVAL)
  for (;;) {
    const f = rng.pick<() => string>([
      () => `We went there ${rng.pick(TIMES)}.`,
      () => `I bought it ${rng.pick(TIMES)}.`,
      () => `I tried it ${rng.pick(TIMES)}.`,
      () => `${rng.pick(PEOPLE)} recommended it.`,
      () => `${rng.pick(PEOPLE)} told me about it.`,
      () => `I used it for ${rng.pick(["a month", "a week", "three days", "a year", "two months"])}.`,
      () => `We ordered it ${rng.pick(["for dinner", "for lunch", "online", "by phone", "for a party"])}.`,
      () => `I watched it with ${rng.pick(["friends", "my family", "my kids", "a friend"])}.`,
      () => `This was my ${rng.pick(["first", "second", "third"])} time.`,
      () => `It was a ${rng.pick(["gift", "present", "surprise"])} from ${rng.pick(["my aunt", "a friend", "my boss"])}.`,
      () => `We were there ${rng.pick(TIMES)}.`,
      () => `I have had it for ${rng.pick(["two weeks", "a month", "ten days", "a while"])}.`,
      () => `The ${pseudoWord(rng)} was ${rng.pick(["red", "small", "new", "open", "here"])}.`,
      () => `We stopped by ${rng.pick(["after school", "before work", "on the way home", "after the game"])}.`
    ])()
    if (!FILLERS_EVAL.includes(f)) return f
  }
}

const cap = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1)

const polarityWords = (p: "positive" | "negative"): ReadonlyArray<string> => (p === "positive" ? POS : NEG)
const flip = (p: "positive" | "negative"): "positive" | "negative" => (p === "positive" ? "negative" : "positive")

export type Review = { readonly review: string; readonly label: Sentiment }

export const makeReview = (rng: Rng, split: Split): Review => {
  const s1 = pickSubject(rng, split)
  let s2 = pickSubject(rng, split)
  while (subjectText(s2) === subjectText(s1)) s2 = pickSubject(rng, split)
  const subj = subjectText(s1)
  const subj2 = subjectText(s2)
  const filler = () => pickFiller(rng, split)
  const be = rng.chance(0.7) ? "was" : "is"
  const pol: "positive" | "negative" = rng.chance(0.5) ? "positive" : "negative"
  const adj = (p: "positive" | "negative") => rng.pick(polarityWords(p))
  const intens = () => rng.pick(INTENS)
  const kind = rng.int(0, 13)
  let text: string
  let label: Sentiment
  switch (kind) {
    case 0:
    case 1: {
      text = `${cap(subj)} ${be} ${intens()}${adj(pol)}.`
      label = pol
      break
    }
    case 2: {
      // negation flips the polarity: "not bad" is positive, "not great" is negative
      const neg = rng.pick([`${be} not`, `${be}n't`, `${be} not`])
      const tail = rng.chance(0.3) ? " at all" : ""
      text = `${cap(subj)} ${neg} ${adj(pol)}${tail}.`
      label = flip(pol)
      break
    }
    case 3: {
      const a = adj(pol)
      text = rng.pick([
        `Not ${a} at all.`,
        `Honestly, not ${a}.`,
        `It ${be} not ${a}, I must say.`,
        `I would not call ${subj} ${a}.`,
        `${cap(subj)}? Not ${a}.`
      ])
      label = flip(pol)
      break
    }
    case 4: {
      // mixed: one positive and one negative aspect
      const [p1, p2] = rng.chance(0.5) ? (["positive", "negative"] as const) : (["negative", "positive"] as const)
      const conj = rng.pick(["but", "but", "while", "although"])
      text = `${cap(subj)} ${be} ${adj(p1)} ${conj} ${subj2} ${be} ${adj(p2)}.`
      label = "neutral"
      break
    }
    case 5: {
      // both aspects agree
      const conj = rng.pick(["and", "and also", "and"])
      text = `${cap(subj)} ${be} ${intens()}${adj(pol)} ${conj} ${subj2} ${be} ${intens()}${adj(pol)}.`
      if (rng.chance(0.3)) {
        text += " " + (pol === "positive"
          ? rng.pick(["Five stars.", "Would buy again.", "Highly recommended.", "Loved it."])
          : rng.pick(["One star.", "Never again.", "Avoid it.", "Not worth it."]))
      }
      label = pol
      break
    }
    case 6: {
      const n = rng.pick(NEU)
      text = rng.pick([
        `${cap(subj)} ${be} ${n}.`,
        `${cap(subj)} ${be} ${n}, nothing special.`,
        `${cap(subj)} ${be} ${n}, neither good nor bad.`,
        `It ${be} ${n}.`,
        `${cap(subj)} ${be} just ${n}.`,
        `I have no strong feelings about ${subj}.`,
        `${cap(subj)} ${be} ${n}. Nothing more to say.`,
        `${cap(subj)} ${be} ${n}. Nothing special.`,
        `${cap(subj)} ${be} ${n}, I guess.`
      ])
      label = "neutral"
      break
    }
    case 7: {
      const verbs =
        pol === "positive"
          ? ["loved", "liked", "enjoyed", "adored", "really liked", "would recommend"]
          : ["hated", "disliked", "regret buying", "could not stand", "would not recommend", "returned"]
      text = `I ${rng.pick(verbs)} ${subj}${rng.pick([".", "!", "."])}`
      label = pol
      break
    }
    case 8: {
      const a = adj(pol)
      text = rng.pick([
        `What ${a} ${s1.noun}${rng.pick(["!", "."])}`,
        `Such ${a} ${s1.noun}${rng.pick(["!", "."])}`,
        `${cap(a)}!`,
        `${cap(intens())}${a}.`
      ])
      label = pol
      break
    }
    case 9: {
      const facts = [
        `${cap(subj)} ${be} delivered on time.`,
        `I used ${subj} twice.`,
        `${cap(subj)} ${be} blue.`,
        `${cap(subj)} ${be} about two hours long.`,
        `I bought ${subj} last year.`,
        `${cap(subj)} ${be} what I expected.`
      ]
      text = rng.pick(facts)
      label = "neutral"
      break
    }
    case 10: {
      const neutralOrPolar = rng.chance(0.5)
      const core = neutralOrPolar
        ? `${cap(subj)} ${be} ${intens()}${adj(pol)}.`
        : `${cap(subj)} ${be} not ${adj(pol)}.`
      text = `${filler()} ${core}`
      label = neutralOrPolar ? pol : flip(pol)
      break
    }
    case 11: {
      const core = `${cap(subj)} ${be} ${intens()}${adj(pol)}.`
      text = `${core} ${filler()}`
      label = pol
      break
    }
    case 12: {
      const n = rng.pick(NEU)
      text = `${filler()} ${cap(subj)} ${be} ${n}.`
      label = "neutral"
      break
    }
    default: {
      text = `${cap(subj)} ${be} ${intens()}${adj(pol)}${rng.pick(["!", "!!", "."])} ${rng.pick([
        "Would buy again.",
        "Five stars.",
        "One star.",
        "Never again.",
        "Highly recommended.",
        "Avoid it."
      ])}`
      // the second sentence must agree with the first, pick one that does
      const agree =
        pol === "positive"
          ? rng.pick(["Would buy again.", "Five stars.", "Highly recommended."])
          : rng.pick(["One star.", "Never again.", "Avoid it."])
      text = text.replace(/(Would buy again\.|Five stars\.|One star\.|Never again\.|Highly recommended\.|Avoid it\.)$/, agree)
      label = pol
    }
  }
  if (rng.chance(0.1)) text = text.toLowerCase()
  return { review: text, label }
}

export const SENTIMENT_SYSTEM_PROMPTS = [
  "Classify the sentiment of the review.",
  "Classify the sentiment of the review.",
  "Classify the sentiment of the review.",
  "Classify the sentiment of the text.",
  "Classify the sentiment of the review as positive, negative or neutral.",
  "What is the sentiment of this review?",
  "Classify the sentiment. Answer in JSON."
]

export const sentimentAnswer = (label: Sentiment): string => `{"sentiment": "${label}"}`

// ---------------------------------------------------------------------------
// Arithmetic
// ---------------------------------------------------------------------------

export type Question = { readonly question: string; readonly expression: string; readonly result: string }

type Op = "+" | "-" | "*" | "/"

const isEvalPair = (a: number, b: number): boolean => (a * 7 + b * 13) % 10 === 3

const PHRASES: Record<Op, ReadonlyArray<(a: number, b: number) => string>> = {
  "+": [
    (a, b) => `What is ${a} plus ${b}?`,
    (a, b) => `What is ${a} + ${b}?`,
    (a, b) => `Compute ${a} + ${b}`,
    (a, b) => `Calculate ${a} plus ${b}.`,
    (a, b) => `How much is ${a} plus ${b}?`,
    (a, b) => `Add ${a} and ${b}.`,
    (a, b) => `What is the sum of ${a} and ${b}?`,
    (a, b) => `${a} + ${b} = ?`,
    (a, b) => `what's ${a}+${b}?`,
    (a, b) => `Please compute ${a} plus ${b}.`
  ],
  "-": [
    (a, b) => `What is ${a} minus ${b}?`,
    (a, b) => `What is ${a} - ${b}?`,
    (a, b) => `Compute ${a} - ${b}`,
    (a, b) => `Calculate ${a} minus ${b}.`,
    (a, b) => `How much is ${a} minus ${b}?`,
    (a, b) => `What is the difference between ${a} and ${b}?`,
    (a, b) => `${a} - ${b} = ?`,
    (a, b) => `what's ${a}-${b}?`,
    (a, b) => `Please compute ${a} minus ${b}.`
  ],
  "*": [
    (a, b) => `What is ${a} times ${b}?`,
    (a, b) => `What is ${a} * ${b}?`,
    (a, b) => `Compute ${a} * ${b}`,
    (a, b) => `Calculate ${a} times ${b}.`,
    (a, b) => `How much is ${a} multiplied by ${b}?`,
    (a, b) => `Multiply ${a} by ${b}.`,
    (a, b) => `What is the product of ${a} and ${b}?`,
    (a, b) => `${a} * ${b} = ?`,
    (a, b) => `what's ${a}*${b}?`,
    (a, b) => `Please compute ${a} times ${b}.`
  ],
  "/": [
    (a, b) => `What is ${a} divided by ${b}?`,
    (a, b) => `What is ${a} / ${b}?`,
    (a, b) => `Compute ${a} / ${b}`,
    (a, b) => `Calculate ${a} divided by ${b}.`,
    (a, b) => `How much is ${a} divided by ${b}?`,
    (a, b) => `Divide ${a} by ${b}.`,
    (a, b) => `${a} / ${b} = ?`,
    (a, b) => `what's ${a}/${b}?`,
    (a, b) => `Please compute ${a} divided by ${b}.`
  ]
}

const operand = (rng: Rng): number => {
  const r = rng.next()
  return r < 0.25 ? rng.int(0, 20) : r < 0.7 ? rng.int(10, 99) : r < 0.95 ? rng.int(100, 999) : rng.int(1000, 9999)
}

export const makeQuestion = (rng: Rng, split: Split): Question => {
  for (;;) {
    if (rng.chance(0.1)) {
      // a three-operand symbolic expression, copied as written
      const ops: ReadonlyArray<Op> = ["+", "-", "*"]
      const a = rng.int(1, 99), b = rng.int(1, 99), c = rng.int(1, 99)
      const o1 = rng.pick(ops), o2 = rng.pick(ops)
      if (isEvalPair(a, b + c) !== (split === "eval")) continue
      const paren = rng.chance(0.3)
      const expression = paren ? `(${a} ${o1} ${b}) ${o2} ${c}` : `${a} ${o1} ${b} ${o2} ${c}`
      const question = rng.pick([`What is ${expression}?`, `Compute ${expression}`, `Calculate ${expression}.`])
      return { question, expression, result: evaluateExpression(expression) }
    }
    const op = rng.pick<Op>(["+", "-", "*", "/"])
    let a = operand(rng)
    let b = operand(rng)
    if (op === "/") {
      b = rng.int(1, 50)
      a = rng.chance(0.8) ? b * rng.int(0, 60) : rng.int(1, 500)
    }
    if (op === "*" && a > 999 && b > 99) b = rng.int(0, 20)
    if (isEvalPair(a, b) !== (split === "eval")) continue
    const question = rng.pick(PHRASES[op])(a, b)
    const expression = `${a} ${op} ${b}`
    return { question, expression, result: evaluateExpression(expression) }
  }
}

export const finalAnswer = (result: string): string => `The answer is ${result}.`

// ---------------------------------------------------------------------------
// Chat turns
// ---------------------------------------------------------------------------

const CHAT: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
  [["Hello!", "Hello", "Hi!", "Hi", "Hey", "Hey there!", "hello", "hi there", "Greetings!"], "Hello! How can I help you today?"],
  [["Good morning!", "Good morning", "good morning"], "Good morning! How can I help you today?"],
  [["Good evening!", "Good evening"], "Good evening! How can I help you today?"],
  [["Thanks!", "Thank you!", "Thank you very much.", "thanks", "Thanks a lot!"], "You're welcome!"],
  [["Bye!", "Goodbye!", "See you later.", "bye"], "Goodbye! Have a nice day."],
  [["How are you?", "How are you doing?", "how are you"], "I'm doing well, thank you! How can I help?"],
  [["Who are you?", "What are you?", "What is your name?"], "I am Pagantic, a small assistant model."],
  [["What can you do?", "How can you help me?", "What are you good at?"], "I can classify sentiment and do arithmetic with a calculator."],
  [["Tell me a joke.", "Say something funny."], "Why did the math book look sad? It had too many problems."],
  [["Can you help me?", "I need help.", "Help me please."], "Of course! What do you need?"],
  [["OK", "Okay.", "Cool.", "Great!", "Nice."], "Let me know if you need anything else."]
]

export const makeChatTurn = (rng: Rng): { readonly user: string; readonly answer: string } => {
  const [users, answer] = rng.pick(CHAT)
  return { user: rng.pick(users), answer }
}

// ---------------------------------------------------------------------------
// Histories
// ---------------------------------------------------------------------------

export type Example = {
  readonly kind: "sentiment" | "calculator" | "chat" | "decomposition"
  readonly history: ReadonlyArray<ChatHistoryItem>
  readonly functions: ChatModelFunctions | undefined
}

const system = (text: string): ChatHistoryItem => ({ type: "system", text: LlamaText(text).toJSON() })

export const toolCallResponse = (q: Question): ChatModelResponse["response"] => [
  { type: "functionCall", name: "calculator", description: BUNDLED_CALCULATOR_TOOL.description, params: { expression: q.expression }, result: q.result },
  finalAnswer(q.result)
]

const GENERAL_SYSTEM_PROMPTS: ReadonlyArray<string | undefined> = [
  undefined,
  "You are a helpful assistant.",
  "You are a helpful assistant.",
  "You are a helpful assistant. Use the tools when needed.",
  "Answer the user's questions."
]

/** A sentiment conversation around a review (by default one of the older templates). */
export const makeSentimentExample = (rng: Rng, split: Split, review?: Review): Example => {
  const r = review ?? makeReview(rng, split)
  const history: Array<ChatHistoryItem> = []
  if (!rng.chance(0.08)) history.push(system(rng.pick(SENTIMENT_SYSTEM_PROMPTS)))
  const user = rng.chance(0.75) ? r.review : rng.pick([`Review: ${r.review}`, `Text: ${r.review}`, r.review])
  history.push({ type: "user", text: user })
  history.push({ type: "model", response: [sentimentAnswer(r.label)] })
  return { kind: "sentiment", history, functions: undefined }
}

/** A conversation of 1-3 turns mixing calculator questions and chat. */
export const makeAgentExample = (rng: Rng, split: Split): Example => {
  const withTools = rng.chance(0.9)
  const history: Array<ChatHistoryItem> = []
  const sp = rng.pick(GENERAL_SYSTEM_PROMPTS)
  if (sp !== undefined) history.push(system(sp))
  const turns = rng.pick([1, 1, 1, 2, 2, 3])
  let kind: Example["kind"] = "chat"
  for (let i = 0; i < turns; i++) {
    if (withTools && rng.chance(0.7)) {
      const q = makeQuestion(rng, split)
      history.push({ type: "user", text: q.question })
      history.push({ type: "model", response: toolCallResponse(q) })
      kind = "calculator"
    } else {
      const c = makeChatTurn(rng)
      history.push({ type: "user", text: c.user })
      history.push({ type: "model", response: [c.answer] })
    }
  }
  return { kind, history, functions: withTools ? calculatorFunctions : undefined }
}
