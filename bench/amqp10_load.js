// The AMQP 1.0 load of `hutch bench --amqp10` (bench/amqp10.py runs it with Node.js and rhea).
// node amqp10_load.js PORT ADDRESS MODE COUNT SIZE
//   send-unsettled   COUNT messages of SIZE octets, as fast as credit allows, each settled by the
//                    broker's outcome; done when the last outcome came
//   send-settled     COUNT pre-settled messages, then one unsettled: done when it is accepted
//                    (the broker took all before it, in order)
//   receive          COUNT messages received with a credit window of 1000, accepted as they come
// Prints one JSON line: {"count", "seconds", "rate"} or {"error"}.
"use strict";
const rhea = require("rhea");
const [port, address, mode, countText, sizeText] = process.argv.slice(2);
const count = +countText;
const body = rhea.message.data_section(Buffer.alloc(+sizeText, 0x78));
const connection = rhea.create_container({ id: "hutch-bench-" + mode }).connect({
  host: "127.0.0.1", port: +port, username: "guest", password: "guest", reconnect: false,
  tcp_no_delay: true, // (rhea leaves Nagle on for a connection without receivers: each credit would wait for an ACK)
});
let started = 0;
const finish = (n) => {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(JSON.stringify({ count: n, seconds, rate: n / seconds }));
  connection.close();
};
const fail = (what) => { console.log(JSON.stringify({ error: what })); process.exit(1); };
connection.on("connection_error", (ctx) => fail(JSON.stringify(ctx.connection.error)));
connection.on("disconnected", (ctx) => { if (ctx.error) fail(String(ctx.error)); });

if (mode === "send-unsettled") {
  const sender = connection.open_sender({ target: { address } });
  let sent = 0;
  let outcomes = 0;
  sender.on("sendable", () => {
    if (!started) started = process.hrtime.bigint();
    while (sender.sendable() && sent < count) { sender.send({ body }); sent++; }
  });
  sender.on("accepted", () => { if (++outcomes === count) finish(count); });
  sender.on("rejected", (ctx) => fail("rejected: " + JSON.stringify(ctx.delivery.remote_state)));
  sender.on("released", () => fail("released: no queue took the message"));
  sender.on("sender_error", () => fail(JSON.stringify(sender.error)));
} else if (mode === "send-settled") {
  // the settled messages on one link, then one unsettled on a second link of the same session:
  // its outcome comes once the broker has taken every transfer before it
  const sender = connection.open_sender({ target: { address }, snd_settle_mode: 1 });
  const last = connection.open_sender({ target: { address }, name: "last" });
  let sent = 0;
  const more = () => {
    if (!started) started = process.hrtime.bigint();
    while (sender.sendable() && sent < count) { sender.send({ body }); sent++; }
    if (sent === count && last.sendable()) { sent++; last.send({ body }); }
  };
  sender.on("sendable", more);
  last.on("sendable", more);
  last.on("accepted", () => finish(count));
  sender.on("sender_error", () => fail(JSON.stringify(sender.error)));
} else if (mode === "receive") {
  const receiver = connection.open_receiver({ source: { address }, credit_window: 1000, autoaccept: true });
  let got = 0;
  receiver.on("message", () => {
    if (!started) started = process.hrtime.bigint();
    if (++got === count) finish(count);
  });
  receiver.on("receiver_error", () => fail(JSON.stringify(receiver.error)));
} else {
  fail("unknown mode " + mode);
}
