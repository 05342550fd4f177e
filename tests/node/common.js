'use strict';
// Shared by the interop scripts: run a scenario against the broker URL given
// as the first argument (or AMQP_URL), print one JSON line, and always stop.
//
//   success: {"ok": true, ...what the scenario observed}   exit code 0, and the
//            process ends by itself (so nothing, e.g. a socket, was left open)
//   failure: {"ok": false, "error": ..., "code": ..., "step": ...}   exit code 1
//   hang:    {"ok": false, "error": "timed out ...", "step": ...}   exit code 3

const amqp = require('amqplib');

const TIMEOUT_MS = Number(process.env.NODE_SCRIPT_TIMEOUT_MS || 15000);

function run(name, scenario) {
  const url = process.argv[2] || process.env.AMQP_URL;
  const state = { step: 'start', events: [] };
  const timer = setTimeout(() => {
    out({ ok: false, error: `${name}: timed out after ${TIMEOUT_MS} ms`, step: state.step, events: state.events });
    process.exit(3);
  }, TIMEOUT_MS);
  timer.unref(); // fires only if something (a socket, a pending promise's timer) keeps the process alive
  if (!url) {
    out({ ok: false, error: 'usage: node script.js amqp://user:pass@host:port/' });
    process.exit(2);
  }
  const step = (s) => { state.step = s; };
  const event = (e) => { state.events.push(e); };
  scenario(url, step, event).then(
    (result) => { out(Object.assign({ ok: true, events: state.events }, result)); },
    (err) => {
      out({ ok: false, error: String((err && err.stack) || err), code: err && err.code, step: state.step, events: state.events });
      process.exit(1);
    });
}

function out(obj) {
  // stdout is a pipe under the test: writes to pipes are synchronous on Linux,
  // so nothing is lost by a process.exit() that follows
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// Resolve once test() is true (checked every 5 ms); reject after ms.
async function until(what, ms, test) {
  const deadline = Date.now() + ms;
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`waiting for ${what}: not after ${ms} ms`);
    await sleep(5);
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Watch a connection or channel: record its 'error' and 'close' events.
function watch(name, emitter, event) {
  emitter.on('error', (err) => event({ on: name, event: 'error', code: err.code, message: err.message }));
  emitter.on('close', (err) => event({ on: name, event: 'close', error: err ? String(err.message || err) : null }));
}

function body(i) {
  // the same bytes as body() in tests/interop/clients/test_amqplib.py: every byte value appears
  const n = (i * 37) % 300;
  const tail = Buffer.alloc(n);
  for (let k = 0; k < n; k++) tail[k] = (i * 7 + k) & 0xff;
  return Buffer.concat([Buffer.from(`msg-${i}:`), tail]);
}

module.exports = { amqp, run, until, sleep, watch, body };
