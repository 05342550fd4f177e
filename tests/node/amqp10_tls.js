// An AMQP 1.0 client over TLS with rhea, for tests/interop/security/test_tls.py.
// node amqp10_tls.js PORT CA [CERT KEY]: with a certificate, logs in with SASL EXTERNAL (else
// PLAIN as guest), sends one message to /queues/over-tls and prints {"outcome"} or {"error"}.
"use strict";
const fs = require("fs");
const rhea = require("rhea");
const [port, ca, cert, key] = process.argv.slice(2);
const options = { transport: "tls", host: "127.0.0.1", port: +port, servername: "localhost", reconnect: false,
                  ca: [fs.readFileSync(ca)] };
if (cert) Object.assign(options, { cert: fs.readFileSync(cert), key: fs.readFileSync(key), enable_sasl_external: true });
else Object.assign(options, { username: "guest", password: "guest" });
const connection = rhea.create_container({ id: "hutch-tls" }).connect(options);
const done = (line) => { console.log(JSON.stringify(line)); connection.close(); };
connection.on("connection_error", (ctx) => done({ error: ctx.connection.error }));
connection.on("disconnected", (ctx) => { if (ctx.error) { console.log(JSON.stringify({ error: String(ctx.error) })); process.exit(0); } });
const sender = connection.open_sender("/queues/over-tls");
sender.on("sendable", () => { if (sender.sendable()) sender.send({ body: rhea.message.data_section(Buffer.from("tls")) }); });
sender.on("accepted", () => done({ outcome: "accepted" }));
sender.on("rejected", () => done({ outcome: "rejected" }));
sender.on("sender_error", () => done({ error: sender.error }));
