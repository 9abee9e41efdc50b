/**
 * CommandLine: the command line checked before @effect/cli parses it. @effect/cli
 * misreports some mistakes (an unknown option reads as "Invalid subcommand" or
 * becomes the message's text); this pre-parse names them from the commands' own
 * usage: an unknown option (with the closest one), an unknown command, an option
 * without its value, a value that is not a number or not one of the choices.
 */
import * as AutoCorrect from "@effect/cli/AutoCorrect"
import * as CliConfig from "@effect/cli/CliConfig"
import type * as Usage from "@effect/cli/Usage"
import * as Option from "effect/Option"

/**
 * A command's options by name (lower case), each with the kind of value it takes,
 * if any: "integer", "float", "a | b" for choices, "text", or the option's pseudo
 * name (which replaces the kind: numeric options keep none, so they are checked).
 */
type Flags = ReadonlyMap<string, Option.Option<string>>

const flagsOf = (usage: Usage.Usage, into = new Map<string, Option.Option<string>>()): Flags => {
  switch (usage._tag) {
    case "Named":
      for (const name of usage.names) if (name.startsWith("-")) into.set(name.toLowerCase(), usage.acceptedValues)
      break
    case "Optional":
    case "Repeated":
      flagsOf(usage.usage, into)
      break
    case "Alternation":
    case "Concat":
      flagsOf(usage.left, into)
      flagsOf(usage.right, into)
      break
  }
  return into
}

/** @effect/cli's own options, accepted everywhere. */
const builtInFlags: Flags = new Map([
  ["--help", Option.none()],
  ["-h", Option.none()],
  ["--version", Option.none()],
  ["--wizard", Option.none()],
  ["--completions", Option.some("sh | bash | fish | zsh")],
  ["--log-level", Option.some("all | trace | debug | info | warning | error | fatal | none")]
])

/** A user's word quoted in a message: JSON-escaped, and cut short when long. */
const quote = (word: string) => JSON.stringify(word.length > 60 ? `${word.slice(0, 60)}…` : word)

const closest = (name: string, flags: Flags): string | undefined => {
  const ranked = [...flags.keys(), ...builtInFlags.keys()]
    .map((known) => [known, AutoCorrect.levensteinDistance(name.toLowerCase(), known, CliConfig.defaultConfig)] as const)
    .filter(([, distance]) => distance <= 2)
    .sort((a, b) => a[1] - b[1])
  return ranked[0]?.[0]
}

/** Why `value` is no value of this kind (integer, float or one of "a | b"), if it is not. */
const badValue = (flag: string, kind: string, value: string): string | undefined => {
  if (kind === "integer") {
    return !/^[+-]?\d+$/.test(value)
      ? `${flag} expects an integer, got ${quote(value)}`
      : Number.isSafeInteger(Number(value))
      ? undefined
      : `${flag} is out of range, got ${quote(value)}`
  }
  if (kind === "float") {
    return /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(value) ? undefined : `${flag} expects a number, got ${quote(value)}`
  }
  // (a pseudo name replaces the kind: `file.json | json` is a description, not choices)
  const choices = kind.split(" | ")
  return choices.length < 2 || !choices.every((c) => /^[a-z0-9-]+$/.test(c)) || choices.includes(value.toLowerCase())
    ? undefined
    : `${flag} expects one of ${choices.join(", ")}, got ${quote(value)}`
}

/** A command as the check sees it: its name and the options it takes. */
interface Known {
  readonly name: string
  readonly flags: Flags
}

/**
 * The check for a program whose own usage is `root`, with these subcommands' usages (by name): what is wrong with a
 * command line (the arguments after the executable) that @effect/cli would
 * misreport, or undefined when none of these; anything else is left to
 * @effect/cli. After `--` every word is text. `takesText` names the commands
 * whose arguments are free text (a message).
 */
export const checker = (
  root: Usage.Usage,
  commands: Readonly<Record<string, Usage.Usage>>,
  takesText: ReadonlySet<string>
) => {
  const rootFlags = flagsOf(root)
  const known = new Map(
    Object.entries(commands).map(([name, usage]) => [name, { name, flags: flagsOf(usage) }] as const)
  )
  return (args: ReadonlyArray<string>): string | undefined => {
    let current: Known | undefined = undefined
    for (let i = 0; i < args.length; i++) {
      const word = args[i] ?? ""
      if (word === "--") return undefined
      const where = current === undefined ? "pagantic" : `pagantic ${current.name}`
      if (/^--?[A-Za-z]/.test(word)) {
        const equals = word.startsWith("--") ? word.indexOf("=") : -1
        const name = equals < 0 ? word : word.slice(0, equals)
        if (/\s/.test(name)) return `${quote(word)} reads as an option: put text that starts with "-" after -- (${where} -- ${quote(word)})`
        const flags = current === undefined ? rootFlags : current.flags
        const takes = flags.get(name.toLowerCase()) ?? builtInFlags.get(name.toLowerCase())
        if (takes === undefined) {
          const suggestion = closest(name, flags)
          return `unknown option ${quote(name).slice(1, -1)} for ${where}` +
            (suggestion === undefined ? "" : ` (did you mean ${suggestion}?)`) +
            `; see ${where} --help` +
            (current !== undefined && takesText.has(current.name) ? `; text that starts with "-" goes after --` : "")
        }
        if (Option.isNone(takes)) continue
        const value = equals < 0 ? args[++i] : word.slice(equals + 1)
        if (value === undefined) return `${name} needs a value (${takes.value})`
        const problem = badValue(name, takes.value, value)
        if (problem !== undefined) return problem
        continue
      }
      if (current === undefined) {
        current = known.get(word)
        if (current === undefined) return `unknown command ${quote(word)}: the commands are ${[...known.keys()].join(", ")}`
      }
    }
    return undefined
  }
}
