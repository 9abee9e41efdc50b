/**
 * `{ ...base, ...fields }` without the object literal that spells it.
 *
 * V8 (Node 20) builds an object literal that starts with a spread and goes on
 * with fields (`{ ...base, k: v }`) on a slow path: about 500 ns a record,
 * against 25 ns for `{ ...base }` alone, 30-85 ns for the spread after the
 * fields, and 50-120 ns for this `Object.assign` (bench/README, session 22). A
 * facade chat request built three such records, an AgentLoop turn one (two with
 * spans exported), a vote one; test/SourceRules keeps the hot path free of them.
 *
 * The result is a plain object, as the literal's (`keptWith` in ./Kept for a
 * record the call keeps; `Construct.uncheckedWith` for the library's Schema classes).
 */

/** The own enumerable fields of `base`, then `fields` over them: a new plain object. */
export const overlay = <A extends object, B extends object>(base: A, fields: B): Omit<A, keyof B> & B =>
  Object.assign({}, base, fields)
