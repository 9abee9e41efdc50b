/**
 * The shape of a grammar's rules, as llama.cpp builds them (each named rule, one
 * more per group and per repetition, as alternatives of elements), and the checks
 * on it that llama.cpp itself does not make or makes without bounds: left
 * recursion, also through rules that may match nothing, and rules that may begin
 * in too many ways. `Gbnf.check` reads a grammar into a Shape; everything here
 * is a function of the Shape alone, iterative (no recursion on the native stack).
 */
import { excerpt } from "./Text.js"

/** An element of a sequence: a terminal, or the index of a rule. */
export const TERMINAL = -1

/**
 * Rules as llama.cpp builds them: each named rule, and one more per group and
 * per repetition (`x*` is `r ::= x r |`), as alternatives of elements.
 */
export class Shape {
  readonly alternatives: Array<Array<Array<number>>> = []
  /** The named rule each rule was written in (itself for a named rule). */
  readonly writtenIn: Array<number> = []
  readonly names: Array<string | undefined> = []
  private readonly ids = new Map<string, number>()

  rule(name: string): number {
    const known = this.ids.get(name)
    if (known !== undefined) return known
    const id = this.add(undefined)
    this.names[id] = name
    this.writtenIn[id] = id
    this.ids.set(name, id)
    return id
  }

  add(writtenIn: number | undefined): number {
    const id = this.alternatives.length
    this.alternatives.push([])
    this.names.push(undefined)
    this.writtenIn.push(writtenIn ?? id)
    return id
  }
}

/** Which rules may match nothing: a worklist over alternatives, linear in the grammar. */
const nullableRules = (shape: Shape): Array<boolean> => {
  const nullable = shape.alternatives.map(() => false)
  const owners: Array<number> = []
  const remaining: Array<number> = []
  const uses: Array<Array<number>> = shape.alternatives.map(() => [])
  const queue: Array<number> = []
  shape.alternatives.forEach((alternatives, rule) => {
    for (const sequence of alternatives) {
      const alternative = owners.length
      owners.push(rule)
      let refs = 0
      for (const element of sequence) {
        if (element === TERMINAL) {
          refs = -1
          break
        }
        refs++
      }
      remaining.push(refs)
      if (refs === 0) queue.push(rule)
      else if (refs > 0) for (const element of sequence) uses[element]!.push(alternative)
    }
  })
  while (queue.length > 0) {
    const rule = queue.pop()!
    if (nullable[rule]) continue
    nullable[rule] = true
    for (const alternative of uses[rule]!) {
      remaining[alternative]!--
      if (remaining[alternative] === 0) queue.push(owners[alternative]!)
    }
  }
  return nullable
}

/** A rule a rule may begin with, and whether anything follows it in that alternative. */
interface LeftEdge {
  readonly target: number
  readonly tail: boolean
}

/** The rules each rule may begin with: those at the start of an alternative, or after rules that may match nothing. */
const leftEdges = (shape: Shape, nullable: ReadonlyArray<boolean>): Array<Array<LeftEdge>> =>
  shape.alternatives.map((alternatives) => {
    const edges: Array<LeftEdge> = []
    for (const sequence of alternatives) {
      for (let i = 0; i < sequence.length; i++) {
        const element = sequence[i]!
        if (element === TERMINAL) break
        edges.push({ target: element, tail: i === sequence.length - 1 })
        if (!nullable[element]) break
      }
    }
    return edges
  })

/**
 * The strongly connected components of the left edges (Tarjan's algorithm with
 * an explicit stack), each after every component it may begin with.
 */
const leftComponents = (edges: ReadonlyArray<ReadonlyArray<LeftEdge>>): Array<Array<number>> => {
  const index = edges.map(() => -1)
  const low = edges.map(() => 0)
  const onStack = edges.map(() => false)
  const stack: Array<number> = []
  const components: Array<Array<number>> = []
  let counter = 0
  for (let root = 0; root < edges.length; root++) {
    if (index[root] !== -1) continue
    const work: Array<[number, number]> = [[root, 0]]
    while (work.length > 0) {
      const frame = work[work.length - 1]!
      const [rule, next] = frame
      if (next === 0 && index[rule] === -1) {
        index[rule] = low[rule] = counter++
        stack.push(rule)
        onStack[rule] = true
      }
      if (next < edges[rule]!.length) {
        frame[1] = next + 1
        const target = edges[rule]![next]!.target
        if (index[target] === -1) work.push([target, 0])
        else if (onStack[target]) low[rule] = Math.min(low[rule]!, index[target]!)
        continue
      }
      work.pop()
      const parent = work.at(-1)
      if (parent !== undefined) low[parent[0]] = Math.min(low[parent[0]]!, low[rule]!)
      if (low[rule] === index[rule]) {
        const component: Array<number> = []
        let member: number
        do {
          member = stack.pop()!
          onStack[member] = false
          component.push(member)
        } while (member !== rule)
        components.push(component)
      }
    }
  }
  return components
}

/**
 * A rule that may begin with itself with something left to match after it: each
 * round of llama.cpp's expansion then pushes that rest again, without end. (A
 * repetition such as `("a"?)*` loops back only at its end, which llama.cpp
 * notices.) Any edge inside a component lies on a cycle.
 */
const growingRecursion = (
  edges: ReadonlyArray<ReadonlyArray<LeftEdge>>,
  components: ReadonlyArray<ReadonlyArray<number>>
): number | undefined => {
  const componentOf = edges.map(() => 0)
  components.forEach((component, c) => {
    for (const rule of component) componentOf[rule] = c
  })
  for (let rule = 0; rule < edges.length; rule++) {
    for (const edge of edges[rule]!) {
      if (!edge.tail && componentOf[edge.target] === componentOf[rule]) return rule
    }
  }
  return undefined
}

/**
 * A rule on a cycle of left edges, if any: llama.cpp's own test for left
 * recursion, run on edges that pass over a rule only when an alternative of it
 * is empty as written (not through other rules that may match nothing).
 */
const cyclic = (edges: ReadonlyArray<ReadonlyArray<LeftEdge>>, components: ReadonlyArray<ReadonlyArray<number>>): number | undefined => {
  for (const component of components) {
    if (component.length > 1) return component[0]
    const rule = component[0]!
    if (edges[rule]!.some((edge) => edge.target === rule)) return rule
  }
  return undefined
}

/**
 * A rule whose ways to begin pass `max`, if any. Components come after those they
 * may begin with, so each count uses final counts; a rule of the same component
 * adds no new way (llama.cpp's expansion returns to a stack it has seen).
 */
const tooManyStarts = (
  shape: Shape,
  nullable: ReadonlyArray<boolean>,
  components: ReadonlyArray<ReadonlyArray<number>>,
  max: number
): number | undefined => {
  const starts = shape.alternatives.map(() => 0)
  const componentOf = shape.alternatives.map(() => -1)
  for (let c = 0; c < components.length; c++) {
    for (const rule of components[c]!) componentOf[rule] = c
    for (const rule of components[c]!) {
      let count = 0
      for (const sequence of shape.alternatives[rule]!) {
        let ended = false
        for (const element of sequence) {
          if (element === TERMINAL) count += 1
          else if (componentOf[element] !== c) count += starts[element]!
          if (element === TERMINAL || !nullable[element]) {
            ended = true
            break
          }
        }
        if (!ended) count++
        if (count > max) return rule
      }
      starts[rule] = count
    }
  }
  return undefined
}

/**
 * What is wrong with the shape of a grammar's rules, if anything: a rule that is
 * left-recursive (llama.cpp would expand it without end), or one that may begin
 * in more than `maxStarts` ways. Linear in the rules but for the count of starts.
 */
export const problemOf = (shape: Shape, maxStarts: number): string | undefined => {
  const nullable = nullableRules(shape)
  const edges = leftEdges(shape, nullable)
  const components = leftComponents(edges)
  const nameOf = (rule: number) => excerpt(shape.names[shape.writtenIn[rule]!] ?? "?", 0)
  const directlyEmpty = shape.alternatives.map((alternatives) => alternatives.some((sequence) => sequence.length === 0))
  const llamaEdges = leftEdges(shape, directlyEmpty)
  const recursive = growingRecursion(edges, components) ?? cyclic(llamaEdges, leftComponents(llamaEdges))
  if (recursive !== undefined) {
    return `the grammar's rule ${nameOf(recursive)} is left-recursive: it can begin with itself ` +
      "(directly, or after rules that may match nothing), which llama.cpp would expand without end"
  }
  const wide = tooManyStarts(shape, nullable, components, maxStarts)
  if (wide !== undefined) {
    return `the grammar's rule ${nameOf(wide)} can begin in more than ${maxStarts.toLocaleString("en-US")} ways ` +
      "(alternatives that begin with rules of several alternatives multiply), and llama.cpp tracks each"
  }
  return undefined
}
