/**
 * How a grammar or schema problem is told: an excerpt of at most a few dozen
 * characters (never the text itself), a line and column, a size in plain units,
 * and the characters the checks look for.
 */
const EXCERPT_CHARS = 24

/** At most EXCERPT_CHARS characters from `index`, quoted and escaped (control characters stay visible). */
export const excerpt = (text: string, index: number): string => {
  const end = Math.min(text.length, index + EXCERPT_CHARS)
  return JSON.stringify(text.slice(index, end)) + (end < text.length ? "..." : "")
}

export const sizeLabel = (bytes: number): string =>
  bytes >= 1024 * 1024
    ? `${(bytes / (1024 * 1024)).toFixed(1)} MiB`
    : bytes >= 1024
    ? `${(bytes / 1024).toFixed(1)} KiB`
    : `${bytes} bytes`

/** UTF-8 length of a string, stopping as soon as it passes `max` (then it returns a value above `max`). */
export const utf8Length = (text: string, max: number): number => {
  if (text.length > max) return text.length
  let bytes = 0
  for (let i = 0; i < text.length && bytes <= max; i++) {
    const code = text.charCodeAt(i)
    if (code < 0x80) bytes += 1
    else if (code < 0x800) bytes += 2
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      bytes += 4
      i++
    } else bytes += 3
  }
  return bytes
}

/** "at line L, column C" of a UTF-16 index (counted only when a problem is reported). */
export const position = (text: string, index: number): string => {
  let line = 1
  let lineStart = 0
  for (let i = 0; i < index; i++) {
    if (text.charCodeAt(i) === 0x0a) {
      line++
      lineStart = i + 1
    }
  }
  return `at line ${line}, column ${index - lineStart + 1}`
}

export const isWordChar = (code: number): boolean =>
  (code >= 0x61 && code <= 0x7a) || (code >= 0x41 && code <= 0x5a) || (code >= 0x30 && code <= 0x39) || code === 0x2d

/** C0 controls but tab, line feed and carriage return; and DEL. */
export const isControl = (code: number): boolean =>
  (code < 0x20 && code !== 0x09 && code !== 0x0a && code !== 0x0d) || code === 0x7f

export const controlName = (code: number): string =>
  code === 0 ? "a NUL character" : `the control character U+${code.toString(16).toUpperCase().padStart(4, "0")}`
