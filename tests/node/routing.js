'use strict';
// topic and fanout exchanges: who gets what.
const { amqp, run, watch } = require('./common');

async function drain(ch, q) {
  const got = [];
  for (;;) {
    const m = await ch.get(q, { noAck: true });
    if (m === false) return got;
    got.push(m.fields.routingKey + '=' + m.content.toString());
  }
}

run('routing', async (url, step, event) => {
  step('connect');
  const conn = await amqp.connect(url);
  watch('connection', conn, event);
  const ch = await conn.createChannel();
  watch('channel', ch, event);

  step('topic');
  await ch.assertExchange('node.topic', 'topic', { durable: false });
  const patterns = {
    'node.t.star': 'sensor.*.temp',
    'node.t.hash': 'sensor.#',
    'node.t.alarm': '#.alarm',
    'node.t.exact': 'sensor.kitchen.temp',
    'node.t.all': '#',
  };
  for (const [q, pattern] of Object.entries(patterns)) {
    await ch.assertQueue(q, { durable: false, autoDelete: false });
    await ch.bindQueue(q, 'node.topic', pattern);
  }
  const keys = ['sensor.kitchen.temp', 'sensor.attic.temp', 'sensor.kitchen.humidity', 'sensor',
    'sensor.kitchen.temp.alarm', 'door.alarm', 'alarm', 'other.thing', ''];
  keys.forEach((k, i) => ch.publish('node.topic', k, Buffer.from(String(i))));
  const topic = {};
  for (const q of Object.keys(patterns)) topic[q] = await drain(ch, q);

  step('unbind');
  await ch.unbindQueue('node.t.all', 'node.topic', '#');
  ch.publish('node.topic', 'sensor.x.temp', Buffer.from('after-unbind'));
  const afterUnbind = {};
  for (const q of Object.keys(patterns)) afterUnbind[q] = await drain(ch, q);

  step('fanout');
  await ch.assertExchange('node.fanout', 'fanout', { durable: false });
  const a = (await ch.assertQueue('', { exclusive: true })).queue;
  const b = (await ch.assertQueue('', { exclusive: true })).queue;
  await ch.bindQueue(a, 'node.fanout', '');
  await ch.bindQueue(b, 'node.fanout', 'ignored');
  ch.publish('node.fanout', 'any.key', Buffer.from('f1'));
  ch.publish('node.fanout', '', Buffer.from('f2'));
  const fanout = { a: await drain(ch, a), b: await drain(ch, b) };

  step('cleanup');
  for (const q of Object.keys(patterns)) await ch.deleteQueue(q);
  await ch.deleteExchange('node.topic');
  await ch.deleteExchange('node.fanout');
  await ch.close();
  await conn.close();
  return { topic, afterUnbind, fanout };
});
