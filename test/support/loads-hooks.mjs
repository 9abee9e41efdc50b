// Module hooks (node:module register): report every resolved URL to the main thread.
let port
export async function initialize(data) {
  port = data.port
}
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context)
  port.postMessage(result.url)
  return result
}
