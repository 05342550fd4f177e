'use strict';
// AMQP over TLS (an amqps:// URL): connect with the CA to check the broker against (TLS_CA), a
// client certificate and key when given (TLS_CERT, TLS_KEY), and SASL EXTERNAL when
// TLS_EXTERNAL=1 (the user is the certificate's); then a round trip through a queue and a clean
// close. A refused connection is reported (ok: false, with its error) like any failure.
const fs = require('fs');
const { amqp, run, until } = require('./common');

run('amqps', async (url, step) => {
  const options = { ca: [fs.readFileSync(process.env.TLS_CA)], servername: 'localhost' };
  if (process.env.TLS_CERT) {
    options.cert = fs.readFileSync(process.env.TLS_CERT);
    options.key = fs.readFileSync(process.env.TLS_KEY);
  }
  if (process.env.TLS_EXTERNAL === '1') options.credentials = amqp.credentials.external();
  step('connect');
  const conn = await amqp.connect(url, options);
  const protocol = conn.connection.stream.getProtocol();
  step('round trip');
  const ch = await conn.createChannel();
  const { queue } = await ch.assertQueue('', { exclusive: true });
  const got = [];
  await ch.consume(queue, (msg) => got.push(msg.content.toString()), { noAck: true });
  ch.sendToQueue(queue, Buffer.from('over tls'));
  await until('the message back', 5000, () => got.length > 0);
  await ch.close();
  await conn.close();
  return { body: got[0], protocol };
});
