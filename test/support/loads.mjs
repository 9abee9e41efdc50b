// `node --import tsx test/support/loads.mjs <module>`: imports the module and prints,
// as JSON, every module URL that was resolved while loading it.
import { register } from "node:module"
import { pathToFileURL } from "node:url"
import { MessageChannel } from "node:worker_threads"

const { port1, port2 } = new MessageChannel()
const urls = []
port1.on("message", (url) => urls.push(url))
register(new URL("./loads-hooks.mjs", import.meta.url), { data: { port: port2 }, transferList: [port2] })
await import(pathToFileURL(process.argv[2]).href)
await new Promise((resolve) => setTimeout(resolve, 200))
port1.close()
process.stdout.write(JSON.stringify(urls))
