/**
 * services/internal/Kept: a record built as a class instance (no allocation site
 * V8 could pretenure) that reads as the literal it was built from.
 */
import { describe, expect, it } from "vitest"
import { Kept, kept, keptArray } from "../src/services/internal/Kept.js"

describe("Kept", () => {
  it("a kept record has the literal's own properties, in order, symbols too, and is a Kept", () => {
    const tag = Symbol.for("test/tag")
    const nested = { c: [1, 2] }
    const fields = { b: 1, a: "x", nested, [tag]: true, missing: undefined }
    const record = kept(fields)
    expect(record).toBeInstanceOf(Kept)
    expect(record).not.toBe(fields)
    expect(Object.keys(record)).toEqual(["b", "a", "nested", "missing"])
    expect(tag in record).toBe(true)
    expect(record.nested).toBe(nested)
    expect(record).toEqual(fields)
    expect(JSON.stringify(record)).toBe(JSON.stringify(fields))
    expect({ ...record }).toEqual(fields)
    // a prototype check sees the class: what a caller may notice (the module header says so)
    expect(Object.getPrototypeOf(record)).not.toBe(Object.prototype)
  })

  it("a kept record is its own: writing to it leaves the literal alone", () => {
    const fields = { text: "" }
    const record = kept(fields)
    record.text += "more"
    expect(fields.text).toBe("")
    expect(record.text).toBe("more")
  })

  it("keptArray makes a new, empty, writable array each time", () => {
    const a = keptArray<number>()
    const b = keptArray<number>()
    expect(a).not.toBe(b)
    a.push(1, 2)
    expect(a).toEqual([1, 2])
    expect(b).toEqual([])
    expect(Array.isArray(a)).toBe(true)
  })
})
