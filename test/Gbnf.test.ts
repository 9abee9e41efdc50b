/**
 * domain/Gbnf: the pre-check of grammars and schemas before llama.cpp. Pure: the
 * grammars llama.cpp accepts (its own examples, the ones node-llama-cpp generates
 * from JSON schemas) pass; hostile ones are refused in plain words, quickly,
 * without quoting more than an excerpt.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Gbnf from "../src/domain/Gbnf.js"

const problem = (grammar: string, limits?: Partial<Gbnf.Limits>): string => {
  const checked = Gbnf.check(grammar, limits)
  if (Either.isRight(checked)) throw new Error(`expected a problem, the grammar passed: ${grammar.slice(0, 60)}`)
  return checked.left
}

const passes = (grammar: string) => expect(Gbnf.check(grammar)).toEqual(Either.right(grammar))

const nested = (levels: number) => "root ::= " + "(".repeat(levels) + "\"a\"" + ")".repeat(levels)

/** llama.cpp's example grammars, shipped with node-llama-cpp. */
const examples = (() => {
  const dir = path.join("node_modules", "node-llama-cpp", "llama", "grammars")
  return fs.readdirSync(dir).filter((file) => file.endsWith(".gbnf")).map((file) => [file, fs.readFileSync(path.join(dir, file), "utf8")] as const)
})()

describe("Gbnf.check: grammars that llama.cpp accepts pass", () => {
  it("llama.cpp's example grammars", () => {
    expect(examples.length).toBeGreaterThanOrEqual(5)
    for (const [, grammar] of examples) passes(grammar)
  })

  it("literals, classes, comments, repetitions and tokens are not taken for structure", () => {
    passes('root ::= "(" ")" "\\"(" [(] [\\]( ] "[" "#"')
    passes('root ::= [a-z] # a comment with ( " [ and an-undefined-rule\nx ::= "a"')
    passes('root ::= "a"{ 2 , 3 } [0-9]{0,15} "b"{4}')
    passes("root ::= <[1000]> !<[1001]>")
    passes('root ::= ("a"\n  | "b")\n')
    passes('root::="a"')
    passes('root ::= "héllo wörld 🙂" [é-ü]')
    passes('root ::= "a\u0001b"')
    passes(nested(64))
  })

  it("a grammar node-llama-cpp generates from a JSON schema (two levels of parentheses)", () => {
    passes([
      'root ::= "{" whitespace-b-1-4-rule "\\"a\\"" ":" [ ]? rule8 whitespace-b-0-4-rule "}" "\\n\\n\\n\\n" [\\n]*',
      'string-char-rule ::= [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ["\\\\/bfnrt] | "\\\\u" [0-9a-fA-F]{4}',
      'string-rule ::= "\\"" string-char-rule* "\\""',
      'fractional-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?',
      "whitespace-b-1-4-rule ::= [\\n] (\"    \" | \"\\t\") | [ ]?",
      "whitespace-b-0-4-rule ::= [\\n] | [ ]?",
      'rule7 ::= "{" whitespace-b-1-4-rule "\\"x\\"" ":" [ ]? fractional-number-rule whitespace-b-0-4-rule "}"',
      "rule8 ::= ( string-rule | rule7 )"
    ].join("\n"))
  })
})

describe("Gbnf.check: hostile or broken grammars are refused in plain words", () => {
  it("parentheses nested 20,000 deep (llama.cpp's parser overflows the native stack) are refused", () => {
    expect(problem(nested(20_000))).toMatch(/^the grammar nests parentheses more than 64 deep at line 1, column 74: "\({24}"\.\.\.$/)
    expect(problem(nested(65))).toMatch(/more than 64 deep/)
    expect(Gbnf.check(nested(100), { maxDepth: 100 })).toEqual(Either.right(nested(100)))
  })

  it("a 10 MB grammar is refused by its size without being scanned or quoted", () => {
    const big = "root ::= \"" + "a".repeat(10 * 1024 * 1024) + "\""
    const start = performance.now()
    const text = problem(big)
    expect(performance.now() - start).toBeLessThan(500)
    expect(text).toBe("the grammar is larger than 64.0 KiB (10.0 MiB or more)")
    // Multi-byte characters count as their UTF-8 bytes.
    expect(problem("root ::= \"" + "é".repeat(40_000) + "\"")).toMatch(/larger than 64\.0 KiB/)
  })

  it("NUL anywhere, other control characters outside literals", () => {
    expect(problem('root ::= "a\u0000b"')).toMatch(/contains a NUL character at line 1, column 12/)
    expect(problem('root ::= "a\\\u0000"')).toMatch(/NUL/)
    expect(problem('root ::= "a" \u0001')).toMatch(/control character U\+0001 outside a quoted literal/)
    expect(problem('root ::= "a"\u007f')).toMatch(/U\+007F/)
  })

  it("empty, not GBNF, no root, undefined rule", () => {
    expect(problem("")).toMatch(/defines no rules/)
    expect(problem("hello")).toMatch(/defines no rules/)
    expect(problem('x ::= "a"')).toMatch(/no root rule/)
    expect(problem("root ::= undefined-rule")).toBe(
      'the grammar uses the rule "undefined-rule", which it does not define, at line 1, column 10: "undefined-rule"'
    )
  })

  it("unclosed or unbalanced literals, classes, parentheses, repetitions", () => {
    expect(problem('root ::= "abc')).toMatch(/does not close the quoted literal that starts at line 1, column 10/)
    expect(problem("root ::= [abc")).toMatch(/does not close the character class/)
    expect(problem('root ::= ("a"')).toMatch(/leaves a parenthesis open/)
    expect(problem('root ::= "a" )')).toMatch(/closes a parenthesis that was never opened/)
    expect(problem('root ::= "a"{x}')).toMatch(/no digit inside a repetition/)
    expect(problem('root ::= "a"{2')).toMatch(/does not close the repetition/)
  })

  it("repetition counts are bounded: 2,000 a count (llama.cpp refuses a larger minimum), 8,192 in all", () => {
    expect(Gbnf.defaultLimits).toMatchObject({ maxRepeatCount: 2000, maxRepeatTotal: 8192 })
    for (const ok of ['root ::= "a"{2000}', 'root ::= "a"{0,2000}', 'root ::= "a"{2000,}', 'root ::= ("a"{2000}){2000} "b"{2000} "c"{2000}']) {
      expect(Gbnf.check(ok)).toEqual(Either.right(ok))
    }
    expect(problem('root ::= "a"{2001}')).toBe('the grammar repeats an item more than 2,000 times at line 1, column 13: "{2001}"')
    expect(problem('root ::= "a"{0,100000}')).toMatch(/^the grammar repeats an item more than 2,000 times at line 1, column 13/)
    expect(problem(`root ::= "a"{${"9".repeat(400)}}`)).toMatch(/repeats an item more than 2,000 times/)
    // each under the bound, more than 8,192 together
    const many = `root ::= ${Array.from({ length: 5 }, () => '"a"{2000}').join(" ")}`
    expect(problem(many)).toMatch(/^the grammar repeats items more than 8,192 times in all at line 1, column \d+/)
    expect(Gbnf.check('root ::= "a"{3} "b"{3}', { maxRepeatTotal: 5 })).toSatisfy(Either.isLeft)
    expect(Gbnf.check('root ::= "a"{3} "b"{2}', { maxRepeatTotal: 5 })).toSatisfy(Either.isRight)
  })

  it("too many rules", () => {
    const rules = ['root ::= r0'].concat(Array.from({ length: 10 }, (_, i) => `r${i} ::= "${i}"`)).join("\n")
    expect(Gbnf.check(rules, { maxRules: 11 })).toEqual(Either.right(rules))
    expect(problem(rules, { maxRules: 10 })).toMatch(/defines more than 10 rules at line 11/)
  })

  it("the problem is line and column and an excerpt of at most a few dozen characters", () => {
    const long = 'root ::= "a"\n' + "x ::= " + "(".repeat(100) + "\"" + "y".repeat(5000)
    const text = problem(long)
    expect(text).toMatch(/at line 2, column 71/)
    expect(text.length).toBeLessThan(160)
  })

  it("linear: a 64 KiB grammar of many rules is checked in milliseconds", () => {
    const rules = ["root ::= r0"]
    let length = 0
    for (let i = 0; length < 60_000; i++) {
      rules.push(`r${i} ::= ("a" r${i + 1}? | [b-c])*`)
      length += rules.at(-1)!.length + 1
    }
    rules.push(`r${rules.length - 1} ::= "z"`)
    const grammar = rules.join("\n")
    const start = performance.now()
    expect(Gbnf.check(grammar, { maxRules: 10_000 })).toEqual(Either.right(grammar))
    // About 20 ms once warm; a quadratic pass over 64 KiB would take seconds.
    expect(performance.now() - start).toBeLessThan(1_000)
  })

  it("left recursion, also through rules that may match nothing (llama.cpp misses those and grows without end)", () => {
    expect(problem('root ::= root "a" | "b"')).toMatch(/rule "root" is left-recursive/)
    expect(problem('root ::= a "x"\na ::= b | "y"\nb ::= a "z"')).toMatch(/rule "(a|b)" is left-recursive/)
    expect(problem('root ::= a root "x" | "y"\na ::= "q"?')).toMatch(/rule "root" is left-recursive/)
    expect(problem('root ::= a root "x" | "y"\na ::= b\nb ::= "" | "q"')).toMatch(/left-recursive/)
    expect(problem('root ::= ("" | "a") root')).toMatch(/left-recursive/)
    expect(problem('root ::= "" root | "b"')).toMatch(/left-recursive/)
    // A repetition of something that may match nothing loops back only at its end: llama.cpp copes.
    passes('root ::= ("a"?)* "b"')
    passes('root ::= x* "b"\nx ::= "a"?')
    passes('root ::= ("b" | "a"{0,2})+ "b"')
    // Recursion after something that must match is fine: JSON is written so.
    passes('root ::= "(" root ")" | "x"')
    passes('root ::= "a" root?')
    passes('root ::= item ("," item)*\nitem ::= [a-z]+ | "[" root? "]"')
  })

  it("a rule that can begin in too many ways (llama.cpp's time grows with their square) is refused", () => {
    const doubling = (n: number) => {
      const rules = ['root ::= r0 | r0 "a"']
      for (let i = 0; i < n - 1; i++) rules.push(`r${i} ::= r${i + 1} | r${i + 1} "a"`)
      rules.push(`r${n - 1} ::= "z"`)
      return rules.join("\n")
    }
    expect(Either.isRight(Gbnf.check(doubling(11)))).toBe(true) // 2,048 ways
    expect(problem(doubling(13))).toMatch(/rule "root" can begin in more than 4,096 ways/)
    // Counted, not enumerated: 2^2,000 ways are refused at once.
    const start = performance.now()
    expect(problem(doubling(2_000), { maxRules: 10_000 })).toMatch(/more than 4,096 ways/)
    expect(performance.now() - start).toBeLessThan(1_000)
    const flat = (n: number) => "root ::= " + Array.from({ length: n }, (_, i) => `"v${i}"`).join(" | ")
    expect(Either.isRight(Gbnf.check(flat(4_096)))).toBe(true)
    expect(problem(flat(4_097))).toMatch(/rule "root" can begin in more than 4,096 ways/)
  })
})

describe("Gbnf.checkSchema", () => {
  const object = (levels: number): unknown => {
    let schema: unknown = { type: "string" }
    for (let i = 0; i < levels; i++) schema = { type: "object", properties: { a: schema }, required: ["a"] }
    return schema
  }

  it("real schemas pass, as they are", () => {
    const schema = object(20)
    expect(Gbnf.checkSchema(schema)).toEqual(Either.right(schema))
    const enums = { type: "object", properties: { label: { enum: ["a", "b", "(", "\""] }, n: { type: "integer" } } }
    expect(Gbnf.checkSchema(enums)).toEqual(Either.right(enums))
  })

  it("a schema nested 700 levels is refused without recursion", () => {
    expect(Gbnf.checkSchema(object(700))).toEqual(Either.left("the schema is nested more than 64 levels deep"))
    // Far deeper than any recursive walk could go.
    expect(Either.isLeft(Gbnf.checkSchema(object(200_000)))).toBe(true)
  })

  it("a large enum is refused by size; a NUL in a value or key is refused", () => {
    const big = { enum: Array.from({ length: 60_000 }, (_, i) => `value-${i}`) }
    expect(Gbnf.checkSchema(big)).toEqual(Either.left("the schema is larger than 64.0 KiB as JSON (64.0 KiB or more)"))
    expect(Gbnf.checkSchema({ enum: ["ok", "a\u0000b"] })).toEqual(
      Either.left('the schema has a NUL character in the string "a\\u0000b"')
    )
    expect(Either.isLeft(Gbnf.checkSchema({ type: "object", properties: { "k\u0000": { type: "string" } } }))).toBe(true)
    expect(Gbnf.checkSchema({ enum: ["a\u001fb"] })).toEqual(
      Either.left('the schema has the control character U+001F in the string "a\\u001fb"')
    )
    expect(Either.isRight(Gbnf.checkSchema({ enum: ["tab\there", "line\nbreak"], description: "a\r\nb" }))).toBe(true)
  })
})
