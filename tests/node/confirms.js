'use strict';
// A ConfirmChannel: per-message confirm callbacks and waitForConfirms; a
// mandatory publish that cannot be routed comes back (basic.return) and is
// still confirmed, after the return.
const { amqp, run, until, watch, body } = require('./common');

const N = 500;

run('confirms', async (url, step, event) => {
  step('connect');
  const conn = await amqp.connect(url);
  watch('connection', conn, event);
  const ch = await conn.createConfirmChannel();
  watch('channel', ch, event);
  await ch.assertQueue('node.confirms', { durable: false });

  step('publish');
  const order = []; // the order in which confirm callbacks fired
  const errors = [];
  for (let i = 0; i < N; i++) {
    ch.sendToQueue('node.confirms', body(i), { messageId: String(i) }, (err) => {
      if (err) errors.push(String(err)); else order.push(i);
    });
  }
  step('waitForConfirms');
  await ch.waitForConfirms();
  const confirmedBeforeWait = order.length;
  const queued = (await ch.checkQueue('node.confirms')).messageCount;

  step('mandatory');
  const seq = []; // return and confirm of the unroutable message, in arrival order
  ch.on('return', (msg) => {
    seq.push({ what: 'return', replyCode: msg.fields.replyCode, replyText: msg.fields.replyText,
      exchange: msg.fields.exchange, routingKey: msg.fields.routingKey, body: msg.content.toString() });
  });
  ch.publish('', 'node.nowhere', Buffer.from('lost'), { mandatory: true }, (err) => {
    seq.push({ what: err ? 'nack' : 'ack' });
  });
  await ch.waitForConfirms();
  await until('the return and the ack', 5000, () => seq.length >= 2);

  step('get');
  const got = [];
  for (;;) {
    const msg = await ch.get('node.confirms', { noAck: true });
    if (msg === false) break;
    got.push(msg.content.toString('base64'));
  }
  await ch.deleteQueue('node.confirms');
  step('close');
  await ch.close();
  await conn.close();
  return { confirmed: order.length, confirmedBeforeWait, inOrder: order.every((v, i) => v === i), errors, queued, seq, got };
});
