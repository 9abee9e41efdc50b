/**
 * `{ ...base, ...fields }` without the object literal that spells it.
 *
 * V8 (Node 20) builds an object literal that starts with a spread and goes on
 * with fields (`{ ...base, k: v }`) on a slow path, several times slower than
 * `{ ...base }` alone or this `Object.assign`; test/SourceRules keeps the hot
 * path free of them.
 *
 * The result is a plain object, as the literal's (`keptWith` in ./Kept for a
 * record the call keeps; `Construct.uncheckedWith` for the library's Schema classes).
 */

/** The own enumerable fields of `base`, then `fields` over them: a new plain object. */
export const overlay = <A extends object, B extends object>(base: A, fields: B): Omit<A, keyof B> & B =>
  Object.assign({}, base, fields)
