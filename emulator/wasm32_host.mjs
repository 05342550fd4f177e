// MicroPython's WebAssembly port (32-bit) as a board, under Node: the host side of
// emulator/wasm32.py, which starts this script and speaks to it in JSON lines.
//
//   node wasm32_host.mjs PACKAGE BOARD_DIR HARNESS_DIR HEAP_BYTES
//
// PACKAGE is the npm package's micropython.mjs (@micropython/micropython-webassembly-pyscript,
// tests/node/package.json). BOARD_DIR is the board's filesystem (the firmware bundle, hutch.json),
// copied into the port's in-memory filesystem at /board, the current folder; HARNESS_DIR holds
// emulator/board_in_memory.py, copied to /harness.
//
// One request per line on stdin, one answer per line on stdout ({"error": text} if Python raised):
//
//   {"op": "start"}                          the broker starts: {"live"}
//   {"op": "open"}                           a client connects: {"index"}
//   {"op": "steps", "steps": [[INDEX, HEX, NOW], ...]}
//        one turn of the board's loop per step: the client INDEX (-1: upstream, -2: nobody) sent
//        the octets HEX (at most the read buffer's size) at clock time NOW (ms); answers
//        {"out": {INDEX: HEX}, "closed": [INDEX], "live": [after each step], "log": [lines]}
//   {"op": "call", "name": NAME, "now": NOW} BOARD.NAME() (uplink_open, uplink_refused): {"result", "live"}
//   {"op": "settle"}                         a collection: {"live": [the live heap]}, exact
//   {"op": "import", "names": [MODULE]}      the code census (a board not started): each imported,
//                                            then {"live": heap after a collection, "modules", "qstr_bytes"}
//        ... "frozen": true}                 or {"frozen_ram": board_in_memory.frozen_ram() of all loaded}
//   {"op": "modules"}                        {"modules": [every module loaded], "qstr_bytes": the names' heap}
//
// The port collects garbage only when a call from JavaScript returns (it cannot see the
// pointers on WebAssembly's own stack), so each step is its own call and the heap is read at
// the start of the next: "live" is what a board's heap holds between reads (board_in_memory's
// sent() says when a figure may include garbage: never when it could be a new largest).
// Octets go in and out through the port's memory (getValue/setValue): the read buffer is
// filled in place, as a socket's readinto fills a board's, and what the broker sends is
// copied out of its bytes objects; neither allocates in the heap.

import { createInterface } from "node:readline";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [packagePath, boardDir, harnessDir, heapBytes] = process.argv.slice(2);
const { loadMicroPython } = await import(pathToFileURL(packagePath).href);

let log = [];
const mp = await loadMicroPython({
  heapsize: parseInt(heapBytes, 10),
  stdout: (line) => log.push(line),
  stderr: (line) => log.push(line),
});
const M = mp._module;

function copyTree(from, to) {
  mp.FS.mkdirTree(to);
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    const source = join(from, entry.name);
    if (entry.isDirectory()) copyTree(source, `${to}/${entry.name}`);
    else mp.FS.writeFile(`${to}/${entry.name}`, readFileSync(source));
  }
}
copyTree(boardDir, "/board");
copyTree(harnessDir, "/harness");
mp.runPython(`
import os, sys
os.chdir("/board")
sys.path.insert(0, "/harness")
`);

// A bytes or bytearray object on a 32-bit port: type, hash or typecode, length, pointer.
const word = (address) => M.getValue(address, "i32") >>> 0;
function readBytes(objectAddress) {
  const length = word(objectAddress + 8);
  const data = word(objectAddress + 12);
  const out = Buffer.alloc(length);
  for (let i = 0; i < length; i++) out[i] = M.getValue(data + i, "i8") & 0xff;
  return out;
}

let board = null; // the module's functions, once imported
let readBuffer = 0; // where the read buffer's octets are
let readSize = 0;

function fill(octets) {
  if (octets.length > readSize) throw new Error(`a read of ${octets.length} octets: the read buffer holds ${readSize}`);
  for (let i = 0; i < octets.length; i++) M.setValue(readBuffer + i, octets[i], "i8");
}

// [live heap, modules loaded], read after the call before it ended with a collection
function status() {
  return board.status().split(" ").map(Number);
}

// The live heap after a collection (asked for in one call, done as it returns).
const memAlloc = mp.pyimport("gc").mem_alloc;
function collected() {
  mp.runPython("import gc\ngc.collect()");
  return memAlloc();
}

function start() {
  mp.runPython("import board_in_memory");
  const module = mp.pyimport("board_in_memory");
  board = {
    step: module.step,
    sent: module.sent,
    settle: module.settle,
    status: module.status,
    open: module.open_client,
    call: module.call,
    module,
  };
  mp.runPython("board_in_memory.BOARD.start()");
  // Check the reading of the port's objects on octets known on both sides before trusting it.
  const [probe, buffer] = module.check_layout().split(" ").map(Number);
  const seen = readBytes(probe).toString("latin1");
  if (seen !== "hutch: in memory") throw new Error(`this port's bytes objects are not laid out as expected (read ${JSON.stringify(seen)})`);
  readSize = word(buffer + 8);
  readBuffer = word(buffer + 12);
  fill(Buffer.from("hutch"));
  if (module.read_buffer_head(5) !== "hutch") throw new Error("this port's bytearray objects are not laid out as expected");
  board.settle();
  return { live: status(), read_size: readSize };
}

// One step; its output merged into out (per index, in order) and closed. The live heap the
// step's call found (after the collection that ended the call before it) is pushed to lives.
function step(index, octets, now, out, closed, lives) {
  if (index >= -1) fill(octets);
  const lines = board.step(index, octets.length, now).split("\n");
  lives.push(lines[0].split(" ").map(Number));
  for (const line of lines.slice(1)) {
    if (line) {
      const fields = line.split(" ");
      if (fields[1] === "closed") {
        closed.push(Number(fields[0]));
        continue;
      }
      const key = fields[0];
      (out[key] ||= []).push(readBytes(Number(fields[1])));
    }
  }
  board.sent();
}

function answerSteps(steps) {
  const out = {};
  const closed = [];
  const lives = [];
  for (const [index, hex, now] of steps) step(index, Buffer.from(hex, "hex"), now, out, closed, lives);
  lives.push(status()); // after the last step's collection
  const hexOut = {};
  for (const key of Object.keys(out)) hexOut[key] = Buffer.concat(out[key]).toString("hex");
  return { out: hexOut, closed, live: lives };
}

function handle(request) {
  switch (request.op) {
    case "start":
      return start();
    case "open":
      // (a protocol named only when not AMQP's: a string from JavaScript is made in the heap measured)
      return { index: request.protocol ? board.open(request.protocol) : board.open() };
    case "steps":
      return answerSteps(request.steps);
    case "call": {
      const result = board.call(request.name, request.now);
      board.settle();
      return { result, live: [status()] };
    }
    case "settle":
      board.settle();
      return { live: [status()] };
    case "import": {
      for (const name of request.names) mp.runPython(`__import__(${JSON.stringify(name)})`);
      if (request.frozen) {
        // (Not with the heap figures: what the estimate walks keeps some heap for a while.)
        const loaded = modules().filter((name) => name !== "board_in_memory");
        mp.runPython(`import board_in_memory\n_frozen = board_in_memory.frozen_ram(${JSON.stringify(loaded)})`);
        const frozen = mp.globals.get("_frozen");
        mp.runPython("del _frozen");
        return { frozen_ram: frozen };
      }
      return { live: collected(), modules: modules(), qstr_bytes: qstrBytes() };
    }
    case "eval":
      mp.runPython(request.code);
      return {};
    case "modules":
      return { modules: modules(), qstr_bytes: qstrBytes() };
    default:
      throw new Error(`unknown op ${request.op}`);
  }
}

// The heap the interned names (qstrs) take: micropython.qstr_info()'s n_total_bytes, the pools
// and the strings. (A board with hutch frozen into its firmware has its code's names in flash.)
function qstrBytes() {
  const before = log.length;
  mp.runPython("import micropython\nmicropython.qstr_info()");
  const lines = log.splice(before);
  const found = lines.join("\n").match(/n_total_bytes=(\d+)/);
  if (!found) throw new Error(`micropython.qstr_info() said ${JSON.stringify(lines)}`);
  return Number(found[1]);
}

function modules() {
  mp.runPython("import sys\n_hutch_modules = '\\n'.join(sorted(sys.modules))");
  const text = mp.globals.get("_hutch_modules");
  mp.runPython("del _hutch_modules");
  return text ? text.split("\n") : [];
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  let answer;
  try {
    answer = handle(JSON.parse(line));
  } catch (error) {
    answer = { error: error.name === "PythonError" ? error.message : String(error.stack || error) };
  }
  answer.log = log;
  log = [];
  process.stdout.write(JSON.stringify(answer) + "\n");
}
