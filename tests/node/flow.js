'use strict';
// prefetch, ack, nack with requeue (redelivered flag), nack without requeue,
// reject, get / get-empty, and unacked messages going back when a channel closes.
const { amqp, run, until, sleep, watch } = require('./common');

run('flow', async (url, step, event) => {
  step('connect');
  const conn = await amqp.connect(url);
  watch('connection', conn, event);
  const ch = await conn.createChannel();
  watch('channel', ch, event);
  const q = 'node.flow';
  await ch.assertQueue(q, { durable: false });
  const result = {};

  // ---- prefetch: 20 messages, prefetch 5, no acks: exactly 5 arrive
  step('prefetch');
  await ch.prefetch(5);
  for (let i = 0; i < 20; i++) ch.sendToQueue(q, Buffer.from(`p${i}`));
  const held = [];
  let ackEach = false;
  const consumer = await ch.consume(q, (msg) => {
    held.push(msg);
    if (ackEach) ch.ack(msg);
  }, { noAck: false });
  await until('5 deliveries', 5000, () => held.length >= 5);
  await sleep(300); // a 6th delivery would have come by now
  result.prefetchDelivered = held.length;
  ch.ack(held[0]); // one slot frees: exactly one more
  await until('a 6th delivery', 5000, () => held.length >= 6);
  await sleep(300);
  result.afterOneAck = held.length;
  ackEach = true;
  ch.ack(held[held.length - 1], true); // everything delivered so far (multiple), then each as it comes
  await until('all 20 deliveries', 5000, () => held.length >= 20);
  result.prefetchBodies = held.map((m) => m.content.toString());
  result.prefetchTags = held.map((m) => m.fields.deliveryTag);
  await ch.cancel(consumer.consumerTag);
  await ch.prefetch(0);

  // ---- nack with requeue: the same message comes back, marked redelivered
  step('nack requeue');
  ch.sendToQueue(q, Buffer.from('again'));
  const seen = [];
  const c2 = await ch.consume(q, (msg) => {
    seen.push({ body: msg.content.toString(), redelivered: msg.fields.redelivered, tag: msg.fields.deliveryTag });
    if (seen.length === 1) ch.nack(msg, false, true);
    else ch.ack(msg);
  }, { noAck: false });
  await until('the redelivery', 5000, () => seen.length >= 2);
  await ch.cancel(c2.consumerTag);
  result.nackRequeue = seen;

  // ---- get: empty, then three messages with the remaining count
  step('get');
  result.getEmpty = await ch.get(q);
  for (const b of ['g1', 'g2', 'g3']) ch.sendToQueue(q, Buffer.from(b));
  const g1 = await ch.get(q, { noAck: false });
  ch.ack(g1);
  const g2 = await ch.get(q, { noAck: false });
  ch.nack(g2, false, true); // back to the head, redelivered
  const g2again = await ch.get(q, { noAck: false });
  ch.reject(g2again, false); // dropped
  const g3 = await ch.get(q, { noAck: true });
  result.get = [g1, g2, g2again, g3].map((m) => ({ body: m.content.toString(), messageCount: m.fields.messageCount,
    redelivered: m.fields.redelivered, deliveryTag: m.fields.deliveryTag }));
  result.getEmptyAfter = await ch.get(q);

  // ---- nack without requeue drops the message
  step('nack drop');
  ch.sendToQueue(q, Buffer.from('drop me'));
  const d = await ch.get(q, { noAck: false });
  ch.nack(d, false, false);
  result.afterNackDrop = (await ch.checkQueue(q)).messageCount;

  // ---- unacked messages go back, in order, when their channel closes
  step('requeue on close');
  const ch2 = await conn.createChannel();
  for (const b of ['u1', 'u2', 'u3']) ch2.sendToQueue(q, Buffer.from(b));
  const unacked = [];
  await ch2.consume(q, (msg) => unacked.push(msg.content.toString()), { noAck: false });
  await until('3 deliveries on the second channel', 5000, () => unacked.length >= 3);
  await ch2.close();
  const back = [];
  for (;;) {
    const m = await ch.get(q, { noAck: true });
    if (m === false) break;
    back.push({ body: m.content.toString(), redelivered: m.fields.redelivered });
  }
  result.unacked = unacked;
  result.backAfterClose = back;

  step('close');
  await ch.deleteQueue(q);
  await ch.close();
  await conn.close();
  return result;
});
