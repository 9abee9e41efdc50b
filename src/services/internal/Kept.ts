/**
 * A record a call builds and keeps for its whole length (a loop's environment
 * and settings, a request's state, a store's service object): built as an
 * instance of a class, not kept as the object literal that describes it.
 *
 * Why: V8 allocates an object literal at an *allocation site* (one per literal
 * in the source), watches how many of the objects a site made are still alive
 * at each young collection, and when most are, decides to allocate all later
 * objects of that site in the old generation directly (allocation-site
 * pretenuring). A record that lives for a whole turn is alive at a collection
 * that happens during the turn, so its site can be pretenured; from then on
 * each call's record is old garbage the young collector cannot free, and it
 * points at the call's young objects, which are kept through young collections
 * as if alive (copied, then promoted). Those objects' own sites then look
 * long-lived too, and are pretenured in turn (V8's
 * `--no-allocation-site-pretenuring` would avoid it, but a library cannot set it
 * for its users). `new` of a class has no allocation site: the same records built
 * with `kept` keep the call's objects young.
 *
 * The literal given to `kept` is garbage at once (never alive at a collection,
 * so its site is never pretenured); the record is a `Kept` with the same own
 * properties, in the same order. Some are handed to callers (an AgentLoop turn's
 * result, a structured call's, a vote, a request's lifecycle moves): they read,
 * spread, serialize and compare (`toEqual`, Schema) as the literal would; only a
 * check of the prototype (`toStrictEqual`, `Object.getPrototypeOf`) sees the class.
 *
 * `kept` costs an `Object.assign` over a literal; `npm run bench:pretenured --
 * <row>` shows which sites need it.
 */

/** The class of every record `kept` builds: no methods, `Object.prototype` behind it. */
export class Kept {}

/** `fields` as a record of its own (an instance of `Kept`, see the module header). */
export const kept = <A extends object>(fields: A): A => Object.assign(new Kept(), fields)

/**
 * `kept({ ...base, ...fields })`, the fields over `base`'s, without the literal:
 * V8 (Node 20) builds an object literal that starts with a spread and goes on
 * with fields on a slow path.
 */
export const keptWith = <A extends object, B extends object>(base: A, fields: B): Omit<A, keyof B> & B =>
  Object.assign(new Kept(), base, fields)

const none: ReadonlyArray<never> = []

/**
 * A new empty array a call keeps for its length and pushes to (a request's
 * lifecycle moves): an array literal, even `[]`, has an allocation site V8 may
 * pretenure as an object literal's (see the module header); a copy of an empty
 * array made by `slice` has none.
 */
export const keptArray = <A>(): Array<A> => none.slice()
