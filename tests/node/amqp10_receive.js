// An AMQP 1.0 receiver with rhea, for tests/interop/clients/test_amqp10_rhea.py.
// node amqp10_receive.js PORT USER PASSWORD ADDRESS COUNT [release-first]
// Receives COUNT messages (credit 10), accepting each (or releasing the first it gets, which
// then comes again), prints them as one JSON list, and closes; a link error is printed as
// {"link_error": ...}.
"use strict";
const rhea = require("rhea");
const [port, user, password, address, count, mode] = process.argv.slice(2);
const container = rhea.create_container({ id: "hutch-test-receiver" });
const connection = container.connect({ host: "127.0.0.1", port: +port, username: user, password, reconnect: false });
const receiver = connection.open_receiver({ source: address, autoaccept: false, credit_window: 10 });
const got = [];
let released = false;
receiver.on("message", (ctx) => {
  const m = ctx.message;
  if (mode === "release-first" && !released) { released = true; ctx.delivery.release({ delivery_failed: false }); return; }
  got.push({ body: Buffer.from(m.body.content || m.body).toString(), durable: !!m.durable, delivery_count: m.delivery_count || 0,
             application_properties: m.application_properties || null, message_id: m.message_id || null,
             content_type: m.content_type || null, subject: m.subject || null,
             basic_type: (m.message_annotations || {})["x-basic-type"] || null });
  ctx.delivery.accept();
  if (got.length === +count) { console.log(JSON.stringify(got)); receiver.close(); connection.close(); }
});
receiver.on("receiver_error", () => { console.log(JSON.stringify({ link_error: receiver.error })); connection.close(); });
