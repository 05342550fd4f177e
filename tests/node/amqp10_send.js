// An AMQP 1.0 sender with rhea, for tests/interop/clients/test_amqp10_rhea.py.
// node amqp10_send.js PORT USER PASSWORD ADDRESS:COUNT [ADDRESS:COUNT ...]
// Opens one connection, then for each ADDRESS a sender in turn on it, sending COUNT durable
// messages (body "ADDRESS #n" as a data section, application property n), and prints one JSON
// line per sender: {"address", "outcomes": [...]} or {"address", "link_error": {...}}; a
// connection error is printed as {"connection_error": ...}.
"use strict";
const rhea = require("rhea");
const [port, user, password, ...plan] = process.argv.slice(2);
const container = rhea.create_container({ id: "hutch-test" });
const connection = container.connect({ host: "127.0.0.1", port: +port, username: user, password, reconnect: false });
let step = -1;

function next() {
  step += 1;
  if (step >= plan.length) { connection.close(); return; }
  const [address, count] = plan[step].split(":");
  const outcomes = [];
  let sent = 0;
  const sender = connection.open_sender(address === "null" ? { target: {} } : address);
  const finish = (line) => { console.log(JSON.stringify(Object.assign({ address }, line))); next(); };
  sender.on("sendable", () => {
    while (sender.sendable() && sent < +count) {
      const message = { body: rhea.message.data_section(Buffer.from(address + " #" + sent)), durable: true,
                        application_properties: { n: sent } };
      if (address === "null") message.to = "/queues/" + process.env.TO_QUEUE;
      sender.send(message);
      sent++;
    }
  });
  const settle = (what) => (ctx) => {
    outcomes.push(what === "rejected" ? { rejected: ctx.delivery.remote_state.error } : what);
    if (outcomes.length === +count) { sender.close(); finish({ outcomes }); }
  };
  sender.on("accepted", settle("accepted"));
  sender.on("released", settle("released"));
  sender.on("rejected", settle("rejected"));
  sender.on("sender_error", () => finish({ link_error: sender.error }));
}

connection.on("connection_open", next);
connection.on("connection_error", (ctx) => {
  const e = ctx.connection.error || {};
  console.log(JSON.stringify({ connection_error: { condition: e.condition || null, text: JSON.stringify(e) } }));
});
connection.on("disconnected", (ctx) => { if (ctx.error && step < 0) console.log(JSON.stringify({ disconnected: String(ctx.error) })); });
