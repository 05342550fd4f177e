// rhea's AMQP 1.0 type codec, as a reference for amqp10/types.py (tests/amqp10/test_types_rhea.py).
// Reads JSON lines from stdin: {"encode": CASE} writes rhea's octets of CASE as hex;
// {"decode": HEX} writes what rhea reads from those octets, as a CASE. A CASE is
// [type, value]: type one of rhea's wrap_* names without "wrap_", or "list"/"map"/"described"
// with CASEs inside.
"use strict";
const types = require("rhea").types;
const readline = require("readline");

function build(c) {
  const [type, value] = c;
  if (type === "null") return types.wrap(null);
  if (type === "list") return types.wrap_list(value.map(build));
  if (type === "map") { const m = {}; value.forEach(([k, v]) => { m[k] = build(v); }); return types.wrap_map(m); }
  if (type === "symbolic_map") { const m = {}; value.forEach(([k, v]) => { m[k] = build(v); }); return types.wrap_symbolic_map(m); }
  if (type === "described") return types.wrap_described(build(value[1]), value[0]);
  if (type === "binary") return types.wrap_binary(Buffer.from(value, "hex"));
  if (type === "uuid") return types.wrap_uuid(Buffer.from(value, "hex"));
  if (type === "symbol_array") return types.wrap_array(value, 0xa3);
  return types["wrap_" + type](value);
}

function show(v) {
  if (v === null || v === undefined) return null;
  if (Buffer.isBuffer(v)) return { binary: v.toString("hex") };
  if (Array.isArray(v)) return v.map(show);
  if (typeof v === "object" && v.descriptor !== undefined) return { descriptor: show(v.descriptor), value: show(v.value) };
  if (typeof v === "object" && v.type !== undefined && "value" in v) return show(v.value); // a typed value
  if (typeof v === "object") { const o = {}; for (const k of Object.keys(v)) o[k] = show(v[k]); return o; }
  return v;
}

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const request = JSON.parse(line);
  if (request.encode) {
    const w = new types.Writer();
    w.write(build(request.encode));
    console.log(JSON.stringify(w.toBuffer().toString("hex")));
  } else {
    const r = new types.Reader(Buffer.from(request.decode, "hex"));
    console.log(JSON.stringify(show(r.read())));
  }
});
