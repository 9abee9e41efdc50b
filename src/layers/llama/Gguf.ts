/**
 * A check of a GGUF model file's structure before llama.cpp opens it.
 *
 * llama.cpp and node-llama-cpp trust the counts and lengths a GGUF header
 * declares: a truncated file gets as far as llama.cpp's loader, which logs
 * several lines before failing, and a GGUF magic followed by random bytes makes
 * node-llama-cpp allocate a buffer of 8e18 bytes ("The value of "size" is out of
 * range"). So the file is walked here first, with bounds: the header (magic,
 * version, counts that fit the file), every key-value pair and tensor description
 * (types known, lengths inside the file), and the file's size against where the
 * tensor data must end. Only lengths are read, string contents are skipped, and
 * the walk stops after `maxScanBytes` (the rest is left to llama.cpp).
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fs from "node:fs"
import { InferenceFailure } from "../../domain/Failure.js"

/** How far into the file the walk goes (metadata and tensor descriptions; a large vocabulary is a few MiB). */
export const DEFAULT_MAX_SCAN_BYTES = 64 * 1024 * 1024

const MAGIC = 0x46554747 // "GGUF", little-endian
const HEADER_BYTES = 24
// A key-value pair takes at least: key length (8) + one byte of key + value type (4) + one byte of value.
const MIN_KV_BYTES = 14n
// A tensor description takes at least: name length (8) + one byte of name + dimension count (4) + one dimension (8) + type (4) + offset (8).
const MIN_TENSOR_BYTES = 33n
const MAX_DIMS = 4
const DEFAULT_ALIGNMENT = 32n

/** Bytes of one value of each scalar type; strings (8) and arrays (9) are read. */
const scalarBytes: ReadonlyArray<number | undefined> = [1, 1, 2, 2, 4, 4, 4, 1, undefined, undefined, 8, 8, 8]
const STRING = 8
const ARRAY = 9

/**
 * Bytes per element of the ggml tensor types whose size is exact (floats and
 * integers); every other type is quantized at 1.5 bits per weight or more, so a
 * tensor of it takes at least one bit per element: the lower bound used.
 */
const exactElementBytes: Readonly<Record<number, number>> = { 0: 4, 1: 2, 24: 1, 25: 2, 26: 4, 27: 8, 28: 8, 30: 2 }
const MAX_GGML_TYPE = 63

/** What the walk found. */
export interface Summary {
  readonly version: number
  readonly tensors: number
  readonly keys: number
  /** Whether the walk reached the tensor descriptions (false: the file is larger than the scan bound). */
  readonly complete: boolean
}

class Invalid {
  constructor(readonly reason: string) {}
}

/** A forward reader over a file descriptor with one window of `window` bytes. */
class Reader {
  private buffer = Buffer.alloc(0)
  private start = 0n
  position = 0n
  constructor(private readonly fd: number, readonly size: bigint, private readonly window = 1 << 20) {}

  private need(bytes: number, what: string): Buffer {
    const end = this.position + BigInt(bytes)
    if (end > this.size) {
      throw new Invalid(`it ends inside ${what} (at byte ${this.position.toLocaleString("en-US")} of ${this.size.toLocaleString("en-US")})`)
    }
    if (this.position < this.start || end > this.start + BigInt(this.buffer.length)) {
      const length = Number(this.size - this.position < BigInt(this.window) ? this.size - this.position : BigInt(this.window))
      const buffer = Buffer.alloc(Math.max(length, bytes))
      const read = fs.readSync(this.fd, buffer, 0, buffer.length, Number(this.position))
      this.buffer = buffer.subarray(0, read)
      this.start = this.position
      if (read < bytes) throw new Invalid(`it ends inside ${what}`)
    }
    const offset = Number(this.position - this.start)
    this.position = end
    return this.buffer.subarray(offset, offset + bytes)
  }

  u32(what: string): number {
    return this.need(4, what).readUInt32LE(0)
  }

  u64(what: string): bigint {
    return this.need(8, what).readBigUInt64LE(0)
  }

  skip(bytes: bigint, what: string): void {
    if (this.position + bytes > this.size) {
      throw new Invalid(`${what} of ${bytes.toLocaleString("en-US")} bytes runs past the end of the file`)
    }
    this.position += bytes
  }

  /** A GGUF string: its length, then its bytes (skipped unless `keep`). */
  string(what: string, keep = false): string | undefined {
    const length = this.u64(`the length of ${what}`)
    if (length > this.size - this.position) {
      throw new Invalid(`${what} claims ${length.toLocaleString("en-US")} bytes, more than the file holds`)
    }
    if (keep && length <= 256n) return this.need(Number(length), what).toString("utf8")
    this.position += length
    return undefined
  }
}

const walk = (reader: Reader, maxScanBytes: bigint): Summary => {
  if (reader.size < BigInt(HEADER_BYTES)) {
    throw new Invalid(`it has ${reader.size} bytes, fewer than a GGUF header (${HEADER_BYTES})`)
  }
  if (reader.u32("the magic number") !== MAGIC) throw new Invalid(`it does not start with "GGUF"`)
  const version = reader.u32("the version")
  if (version < 2 || version > 3) throw new Invalid(`version ${version} is not supported (2 and 3 are)`)
  const tensors = reader.u64("the tensor count")
  const keys = reader.u64("the metadata count")
  const least = BigInt(HEADER_BYTES) + keys * MIN_KV_BYTES + tensors * MIN_TENSOR_BYTES
  if (least > reader.size) {
    throw new Invalid(
      `its header declares ${tensors.toLocaleString("en-US")} tensors and ${keys.toLocaleString("en-US")} metadata entries, ` +
        `more than ${reader.size.toLocaleString("en-US")} bytes can hold`
    )
  }
  const summary = { version, tensors: Number(tensors), keys: Number(keys) }
  const incomplete = () => reader.position > maxScanBytes

  let alignment = DEFAULT_ALIGNMENT
  for (let k = 0n; k < keys; k++) {
    if (incomplete()) return { ...summary, complete: false }
    const key = reader.string(`metadata key ${k}`, true)
    const type = reader.u32(`the type of metadata key ${k}`)
    if (type === ARRAY) {
      const itemType = reader.u32(`the item type of metadata key ${k}`)
      const count = reader.u64(`the length of metadata array ${k}`)
      if (itemType === STRING) {
        if (count * 8n > reader.size - reader.position) throw new Invalid(`metadata array ${k} claims ${count} strings, more than the file holds`)
        for (let i = 0n; i < count; i++) {
          if (incomplete()) return { ...summary, complete: false }
          reader.string(`string ${i} of metadata array ${k}`)
        }
      } else {
        const bytes = scalarBytes[itemType]
        if (bytes === undefined) throw new Invalid(`metadata array ${k} has items of unknown type ${itemType}`)
        reader.skip(count * BigInt(bytes), `metadata array ${k}`)
      }
    } else if (type === STRING) {
      reader.string(`the value of metadata key ${k}`)
    } else {
      const bytes = scalarBytes[type]
      if (bytes === undefined) throw new Invalid(`metadata key ${k} has unknown type ${type}`)
      if (key === "general.alignment" && type === 4) {
        alignment = BigInt(reader.u32("general.alignment"))
        if (alignment === 0n || (alignment & (alignment - 1n)) !== 0n) throw new Invalid(`its alignment ${alignment} is not a power of two`)
      } else reader.skip(BigInt(bytes), `the value of metadata key ${k}`)
    }
  }

  let dataEnd = 0n
  for (let t = 0n; t < tensors; t++) {
    if (incomplete()) return { ...summary, complete: false }
    reader.string(`the name of tensor ${t}`)
    const dims = reader.u32(`the dimension count of tensor ${t}`)
    if (dims < 1 || dims > MAX_DIMS) throw new Invalid(`tensor ${t} has ${dims} dimensions (1 to ${MAX_DIMS} are possible)`)
    let elements = 1n
    for (let d = 0; d < dims; d++) elements *= reader.u64(`a dimension of tensor ${t}`)
    const type = reader.u32(`the type of tensor ${t}`)
    if (type > MAX_GGML_TYPE) throw new Invalid(`tensor ${t} has unknown type ${type}`)
    const offset = reader.u64(`the offset of tensor ${t}`)
    const exact = exactElementBytes[type]
    const bytes = exact === undefined ? (elements + 7n) / 8n : elements * BigInt(exact)
    if (offset + bytes > dataEnd) dataEnd = offset + bytes
  }
  const dataStart = ((reader.position + alignment - 1n) / alignment) * alignment
  if (dataStart + dataEnd > reader.size) {
    throw new Invalid(
      `it is truncated: it has ${reader.size.toLocaleString("en-US")} bytes, its tensors need at least ` +
        `${(dataStart + dataEnd).toLocaleString("en-US")}`
    )
  }
  return { ...summary, complete: true }
}

/**
 * Walks a GGUF file's structure: its summary, or why it is not a valid GGUF file
 * (a short reason in plain words).
 */
export const inspect = (
  path: string,
  options: { readonly maxScanBytes?: number | undefined } = {}
): Either.Either<Summary, string> => {
  let fd: number | undefined
  try {
    fd = fs.openSync(path, "r")
    const size = BigInt(fs.fstatSync(fd).size)
    return Either.right(walk(new Reader(fd, size), BigInt(options.maxScanBytes ?? DEFAULT_MAX_SCAN_BYTES)))
  } catch (error) {
    if (error instanceof Invalid) return Either.left(error.reason)
    return Either.left(`it cannot be read (${error instanceof Error && "code" in error ? String(error.code) : "read error"})`)
  } finally {
    if (fd !== undefined) fs.closeSync(fd)
  }
}

/** Fails with INFERENCE_MODEL_UNAVAILABLE "<path> is not a valid GGUF file: <reason>" unless the file's structure holds. */
export const validate = (path: string): Effect.Effect<Summary, InferenceFailure> =>
  Effect.flatMap(Effect.sync(() => inspect(path)), (result) =>
    Either.match(result, {
      onRight: Effect.succeed,
      onLeft: (reason) =>
        Effect.fail(InferenceFailure.modelUnavailable(`${path} is not a valid GGUF file: ${reason}`, { modelPath: path, reason }))
    }))
