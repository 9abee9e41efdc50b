/**
 * Instances of the library's own Schema classes, built from values it made
 * itself (validation is for the edges: what a client, a file or a model sends).
 *
 * `new C(props, true)` skips validation but still copies the props twice and
 * walks every field of the class for defaults (Schema's `lazilyMergeDefaults`),
 * a cost paid for every request, message and usage a loop builds.
 * `unchecked(C, props)` builds the same instance
 * (the class's prototype, the props as own fields, each missing field with a
 * default given a fresh default, in the constructor's order) with one copy and a
 * walk of the defaulted fields only, found once per class.
 *
 * For classes made with `Schema.Class` or `Schema.TaggedClass` (plain data over
 * a prototype; not `Schema.TaggedError`, an Error) that declare no constructor of
 * their own. test/Construct checks the instances equal the constructor's.
 */
import * as Schema from "effect/Schema"

/** A Schema class: its fields, and instances of `A`. */
interface SchemaClass<A> {
  new (props: any, options?: any): A
  readonly fields: Schema.Struct.Fields
  readonly prototype: A
}

type Defaults = ReadonlyArray<readonly [PropertyKey, () => unknown]>

const defaultsOf = new WeakMap<Function, Defaults>()

/** The fields of `Class` with a default, and their defaults (as `lazilyMergeDefaults` finds them). */
const defaults = (Class: SchemaClass<unknown>): Defaults => {
  const known = defaultsOf.get(Class)
  if (known !== undefined) return known
  const found: Array<readonly [PropertyKey, () => unknown]> = []
  for (const key of Reflect.ownKeys(Class.fields)) {
    const field = (Class.fields as Record<PropertyKey, unknown>)[key]
    if (!Schema.isPropertySignature(field)) continue
    const ast = field.ast
    const defaultValue = ast._tag === "PropertySignatureDeclaration" ? ast.defaultValue : ast.to.defaultValue
    if (defaultValue !== undefined) found.push([key, defaultValue])
  }
  defaultsOf.set(Class, found)
  return found
}

/** An instance of `Class` from `props`, not validated (see the module's comment). */
export const unchecked = <C extends SchemaClass<any>>(Class: C, props: ConstructorParameters<C>[0]): InstanceType<C> =>
  withDefaults(Class, Object.assign(Object.create(Class.prototype), props))

const withDefaults = <C extends SchemaClass<any>>(Class: C, out: Record<PropertyKey, unknown>): InstanceType<C> => {
  for (const [key, make] of defaults(Class)) if (out[key] === undefined) out[key] = make()
  return out as InstanceType<C>
}
