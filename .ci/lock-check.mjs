// After `npm install`: did the install change anything the lockfile locks?
//
// Usage: node .ci/lock-check.mjs <committed lockfile> <lockfile after install>
//
// The registry reachable from CI serves the builds of optional platform packages
// for other systems (macOS, Windows, musl, riscv, ...) on some days and not on
// others, and `npm install` adds or drops their entries in the lockfile
// accordingly. Such an entry never installs here, so its coming and going is not
// a change to what CI runs. Anything else is: a package whose version or
// integrity changed, a package that appeared or vanished and is installed on this
// machine, or an entry that appeared or vanished and is not optional. Each is
// printed and the check exits 1.
import { existsSync, readFileSync } from "node:fs"

const [committedPath, installedPath] = process.argv.slice(2)
if (!committedPath || !installedPath) {
  console.error("usage: node .ci/lock-check.mjs <committed lockfile> <lockfile after install>")
  process.exit(2)
}
const packagesOf = (path) => JSON.parse(readFileSync(path, "utf8")).packages ?? {}
const before = packagesOf(committedPath)
const after = packagesOf(installedPath)

// An entry that can come and go with the registry: optional, and not installed here.
const foreign = (name, entry) => entry.optional === true && name !== "" && !existsSync(name)

const problems = []
for (const [name, entry] of Object.entries(after)) {
  const old = before[name]
  if (old === undefined) {
    if (!foreign(name, entry)) problems.push(`added: ${name}@${entry.version}`)
  } else if (old.version !== entry.version || old.integrity !== entry.integrity) {
    problems.push(`changed: ${name} ${old.version} -> ${entry.version}`)
  }
}
for (const [name, entry] of Object.entries(before)) {
  if (after[name] === undefined && !foreign(name, entry)) problems.push(`removed: ${name}@${entry.version}`)
}

const added = Object.keys(after).filter((name) => before[name] === undefined).length
const removed = Object.keys(before).filter((name) => after[name] === undefined).length
if (problems.length > 0) {
  console.error("package-lock.json: the install changed what is locked; commit an updated lockfile")
  for (const line of problems) console.error(`  ${line}`)
  process.exit(1)
}
console.log(
  `package-lock.json: the install matches it (${added} foreign-platform entries added, ${removed} dropped by the registry)`
)
