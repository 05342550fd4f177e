// AMQP 1.0 flow, settlement and large messages with rhea, for tests/interop/clients/test_amqp10_rhea.py.
// node amqp10_flow.js PORT MODE [ARGS...]; prints one JSON line of what it saw, then closes.
//   drain QUEUE          credit 2, then drain with credit 10: the bodies and whether the drain was answered
//   settled QUEUE N      a receiver asking for pre-settled deliveries: N bodies, the settled flags
//   outcomes QUEUE       one message each accepted, rejected, released, modified (failed), modified
//                        (undeliverable-here), then what comes again
//   frames QUEUE MAXFRAME SIZE...   sends a message of each SIZE (random octets) with that
//                        max-frame-size, receives them back: each one's size and whether it is intact
"use strict";
const crypto = require("crypto");
const rhea = require("rhea");
const [port, mode, queue, ...args] = process.argv.slice(2);
const options = { host: "127.0.0.1", port: +port, username: "guest", password: "guest", reconnect: false };
if (mode === "frames") options.max_frame_size = +args[0];
const connection = rhea.create_container({ id: "hutch-flow-" + mode }).connect(options);
const done = (line) => { console.log(JSON.stringify(line)); connection.close(); };
connection.on("connection_error", (ctx) => done({ connection_error: ctx.connection.error }));
const address = "/queues/" + queue;
const body = (m) => Buffer.from(m.body.content || m.body).toString();

if (mode === "drain") {
  const receiver = connection.open_receiver({ source: address, credit_window: 0, autoaccept: true });
  const got = [];
  let draining = false;
  receiver.on("receiver_open", () => receiver.add_credit(2));
  receiver.on("message", (ctx) => {
    got.push(body(ctx.message));
    if (got.length === 2 && !draining) { draining = true; receiver.drain = true; receiver.add_credit(10); }
  });
  receiver.on("receiver_drained", () => done({ got, drained: true, credit: receiver.credit }));
} else if (mode === "settled") {
  const receiver = connection.open_receiver({ source: address, snd_settle_mode: 1, credit_window: 10 });
  const got = [];
  receiver.on("message", (ctx) => {
    got.push({ body: body(ctx.message), settled: ctx.delivery.remote_settled });
    if (got.length === +args[0]) done({ got, snd_settle_mode: receiver.snd_settle_mode });
  });
} else if (mode === "outcomes") {
  const receiver = connection.open_receiver({ source: address, autoaccept: false, credit_window: 10 });
  // Each outcome in a turn of its own: rhea merges the disposition of a delivery settled in the
  // same turn as the one before it into that one's, whatever its outcome.
  const plan = ["accept", "reject", "release", "modify-failed", "modify-undeliverable"];
  const again = [];
  let n = 0;
  receiver.on("message", (ctx) => {
    const d = ctx.delivery;
    if (n < plan.length) {
      const what = plan[n++];
      setTimeout(() => {
        if (what === "accept") d.accept();
        else if (what === "release") d.release({ delivery_failed: false });
        else if (what === "reject") d.reject({ condition: "test:rejected", description: "no" });
        else if (what === "modify-failed") d.modified({ delivery_failed: true });
        else d.modified({ delivery_failed: true, undeliverable_here: true });
      }, 20 * n);
      return;
    }
    again.push({ body: body(ctx.message), delivery_count: ctx.message.delivery_count || 0 });
    d.accept();
    if (again.length === 2) setTimeout(() => done({ again }), 100);
  });
} else if (mode === "frames") {
  const sizes = args.slice(1).map(Number);
  const sent = sizes.map((size) => crypto.randomBytes(size));
  const got = [];
  const sender = connection.open_sender(address);
  let i = 0;
  sender.on("sendable", () => {
    while (sender.sendable() && i < sent.length) sender.send({ body: rhea.message.data_section(sent[i++]) });
  });
  let accepted = 0;
  sender.on("accepted", () => {
    if (++accepted < sent.length) return;
    const receiver = connection.open_receiver({ source: address, credit_window: 10 });
    receiver.on("message", (ctx) => {
      const octets = Buffer.from(ctx.message.body.content || ctx.message.body);
      got.push({ size: octets.length, intact: octets.equals(sent[got.length]) });
      if (got.length === sent.length) done({ got, max_frame_size: connection.remote.open.max_frame_size });
    });
  });
}
