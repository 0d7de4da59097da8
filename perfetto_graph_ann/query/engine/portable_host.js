// Host for Perfetto's WebAssembly trace processor (the Perfetto UI's engine_bundle.js) under Node.
//
// The bundle is written for a Web Worker. We give it a worker-like global scope (self,
// WorkerGlobalScope, location, a synchronous XMLHttpRequest that returns the .wasm bytes) and
// hide Node's `process`/`require`/`module` from it, because its emscripten glue refuses to start
// when it detects Node. Its MessagePort speaks TraceProcessorRpcStream bytes; this host serves
// that byte stream on a Unix socket, so any trace processor RPC client (perfetto's Python
// TraceProcessorRpc included) can talk to it.
//
// Usage: node portable_host.js --bundle DIR/engine_bundle.js --socket PATH [--owned-dir DIR]
// --owned-dir: a private folder holding the socket, removed (if empty) on exit.
// Prints one line "READY <version>" on stdout once the socket accepts connections.
// Exits (removing the socket) when stdin closes, i.e. when the parent process goes away --
// also in the middle of a query --, on SIGTERM/SIGINT, or with status 70 if the engine
// crashes (the reason goes to stderr).
'use strict';

const fs = require('fs');
const net = require('net');
const path = require('path');

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    const value = argv[i + 1];
    if (!key.startsWith('--') || value === undefined) {
      throw new Error(`bad arguments: ${argv.join(' ')}`);
    }
    out[key.slice(2)] = value;
  }
  if (!out.bundle || !out.socket) throw new Error('need --bundle and --socket');
  return out;
}

const args = parseArgs(process.argv.slice(2));
const bundleDir = path.dirname(path.resolve(args.bundle));
const socketPath = args.socket;
const nodeProcess = process;
const stderr = (msg) => nodeProcess.stderr.write(msg + '\n');

let server = null;
let client = null;
let exiting = false;

function shutdown(code) {
  if (exiting) return;
  exiting = true;
  try { if (server) server.close(); } catch (e) { /* already closed */ }
  try { fs.unlinkSync(socketPath); } catch (e) { /* already gone */ }
  if (args['owned-dir']) {
    try { fs.rmdirSync(args['owned-dir']); } catch (e) { /* not empty or gone */ }
  }
  nodeProcess.exit(code);
}

// ---- A worker-like global scope for the bundle ----------------------------------------------
class WorkerGlobalScope {}
globalThis.WorkerGlobalScope = WorkerGlobalScope;
globalThis.self = globalThis;
globalThis.location = { href: 'file://' + bundleDir + '/engine_bundle.js' };
globalThis.importScripts = () => { throw new Error('importScripts is not available'); };

// The glue fetches the .wasm with a synchronous XHR; answer it from the bundle's folder.
class XMLHttpRequest {
  open(method, url) { this.url = String(url); }
  send() {
    const name = path.basename(new URL(this.url, globalThis.location.href).pathname);
    const bytes = fs.readFileSync(path.join(bundleDir, name));
    this.response = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    this.status = 200;
  }
}
globalThis.XMLHttpRequest = XMLHttpRequest;

// The engine logs through console.log/warn; keep stdout for the READY line only.
console.log = (...a) => stderr(a.join(' '));
console.info = console.log;
console.warn = console.log;
console.error = console.log;

// The port handed to the engine: replies go to the connected client.
const port = {
  onmessage: null,
  postMessage(data) {
    if (client && !client.destroyed) client.write(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  },
};

function deliver(chunk) {
  try {
    port.onmessage({ data: new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength) });
  } catch (e) {
    stderr(`trace processor crashed: ${e && e.stack ? e.stack : e}`);
    shutdown(70);
  }
}

const source = fs.readFileSync(args.bundle, 'utf8');
// Shadow Node's globals for the bundle only.
const load = new Function('process', 'require', 'module', 'exports', 'global', source + '\n;return self.onmessage;');
const engineOnMessage = load(undefined, undefined, undefined, undefined, undefined);
if (typeof engineOnMessage !== 'function') {
  stderr('engine_bundle.js did not install a message handler');
  nodeProcess.exit(70);
}
engineOnMessage({ data: port });

// ---- Lifetime --------------------------------------------------------------------------------
// A query runs synchronously inside the wasm call and blocks this thread's event loop, so
// stdin is watched from a worker thread: a blocking read that returns at EOF (the parent is
// gone, even if it was SIGKILLed), then it removes the socket and kills this process.
const { Worker } = require('worker_threads');
const watchdog = new Worker(`
  const fs = require('fs');
  const { workerData } = require('worker_threads');
  const buf = Buffer.alloc(4096);
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    let n;
    try { n = fs.readSync(0, buf, 0, buf.length, null); }
    catch (e) {
      if (e.code === 'EAGAIN') { Atomics.wait(nap, 0, 0, 50); continue; }
      n = 0;
    }
    if (n === 0) break;
  }
  try { fs.unlinkSync(workerData.socket); } catch (e) {}
  if (workerData.dir) { try { fs.rmdirSync(workerData.dir); } catch (e) {} }
  process.kill(process.pid, 'SIGKILL');
`, { eval: true, workerData: { socket: socketPath, dir: args['owned-dir'] || null } });
watchdog.unref();
nodeProcess.on('SIGTERM', () => shutdown(143));
nodeProcess.on('SIGINT', () => shutdown(130));
nodeProcess.on('uncaughtException', (e) => {
  stderr(`trace processor host error: ${e && e.stack ? e.stack : e}`);
  shutdown(70);
});

// ---- Serve the RPC byte stream, one client at a time -----------------------------------------
function serve() {
  server = net.createServer((sock) => {
    if (client && !client.destroyed) {
      sock.end();
      return;
    }
    client = sock;
    sock.on('data', deliver);
    sock.on('error', () => {});
    sock.on('close', () => { if (client === sock) client = null; });
  });
  server.on('error', (e) => {
    stderr(`cannot listen on ${socketPath}: ${e.message}`);
    shutdown(71);
  });
  server.listen(socketPath, () => {
    nodeProcess.stdout.write('READY\n');
  });
}

// The wasm runtime initialises asynchronously (a promise resolves once it is ready); poll until
// the engine's request buffer exists by waiting for the runtime-initialised callback's effects.
setImmediate(serve);
