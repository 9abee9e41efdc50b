/**
 * `pagantic keys add NAME --role ROLE`: a principal for `pagantic serve`. The
 * key is printed once and only its SHA-256 is written, to the keys file
 * (`--keys FILE`, else PAGANTIC_KEYS_FILE, else `$PAGANTIC_HOME/keys.json`;
 * made 0600). A running server reads the file when it starts.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Usage from "@effect/cli/Usage"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Keys from "../../http/Keys.js"
import { CliFailure } from "../CliFailure.js"
import { textFlag } from "../Flags.js"
import { CliIo } from "../Io.js"
import { print } from "../Output.js"
import { defaultKeysFile, homeOf } from "../ServeAuth.js"

/** The keys file a command names, else PAGANTIC_KEYS_FILE, else the default one. */
const keysFileOf = (flag: Option.Option<string>): string =>
  Option.getOrUndefined(flag) ??
    (process.env.PAGANTIC_KEYS_FILE !== undefined && process.env.PAGANTIC_KEYS_FILE.trim() !== ""
      ? process.env.PAGANTIC_KEYS_FILE
      : defaultKeysFile(homeOf()))

const add = Command.make(
  "add",
  {
    name: Args.text({ name: "name" }).pipe(Args.withDescription("the principal's name (what its runs are owned by)")),
    role: textFlag("role").pipe(
      Options.withPseudoName("client | admin | responder:<id>"),
      Options.withDescription("what the key may do: client, admin, or responder:<id> (the id a query's human tier names)")
    ),
    keys: textFlag("keys").pipe(
      Options.withDescription("the keys file (default: PAGANTIC_KEYS_FILE, else $PAGANTIC_HOME/keys.json)"),
      Options.optional
    )
  },
  (args) =>
    Effect.gen(function* () {
      const file = keysFileOf(args.keys)
      const key = yield* Keys.add(file, args.name, args.role).pipe(
        Effect.mapError((e) => new CliFailure({ message: e.message }))
      )
      yield* print(key)
      const io = yield* CliIo
      yield* io.error(`added ${args.name} (${args.role}) to ${file}: the key above is shown only now (the file keeps its SHA-256); restart pagantic serve to use it`)
    })
).pipe(Command.withDescription("add a principal to the server's keys file and print its key (shown once)"))

export const keys = Command.make("keys").pipe(
  Command.withDescription("principals of pagantic serve: add"),
  Command.withSubcommands([add])
)

/** What the command line check knows of `keys`: its subcommands' options. */
export const keysUsage: Usage.Usage = Command.getUsage(add)
