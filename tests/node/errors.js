'use strict';
// Channel errors close the channel, never the connection: after each one a
// new channel on the same connection works. Then a clean close.
const { amqp, run, until, watch } = require('./common');

// Run op on a fresh channel; the broker must close the channel. What the
// operation's promise (if any) and the channel's events reported.
async function channelError(conn, name, op) {
  const ch = await conn.createChannel();
  const seen = { errorEvents: [], closed: false };
  ch.on('error', (err) => seen.errorEvents.push({ code: err.code, message: err.message }));
  ch.on('close', () => { seen.closed = true; });
  let rejected = null;
  try {
    await op(ch);
  } catch (err) {
    rejected = { code: err.code, message: err.message };
  }
  await until(`${name}: the channel to close`, 5000, () => seen.closed);
  return { rejected, errorEvents: seen.errorEvents, closed: seen.closed };
}

// The connection still works: a publish/get round trip on a new channel.
async function stillUsable(conn, tag) {
  const ch = await conn.createChannel();
  const q = (await ch.assertQueue('', { exclusive: true })).queue;
  ch.sendToQueue(q, Buffer.from(tag));
  const m = await ch.get(q, { noAck: true });
  await ch.close();
  return m ? m.content.toString() : null;
}

run('errors', async (url, step, event) => {
  step('connect');
  const conn = await amqp.connect(url);
  watch('connection', conn, event);
  const result = { cases: {}, usable: {} };
  const cases = {
    checkQueue: (ch) => ch.checkQueue('node.missing'),
    checkExchange: (ch) => ch.checkExchange('node.missing-ex'),
    redeclare: async (ch) => {
      await ch.assertQueue('node.durable-q', { durable: true });
      await ch.assertQueue('node.durable-q', { durable: false });
    },
    reservedName: (ch) => ch.assertExchange('amq.node', 'direct'),
    bindMissingQueue: (ch) => ch.bindQueue('node.missing', 'amq.direct', 'x'),
    publishToMissingExchange: (ch) => {
      ch.publish('node.missing-ex', 'x', Buffer.from('x')); // no reply: the channel just closes
    },
    unknownDeliveryTag: async (ch) => {
      await ch.assertQueue('node.tags', { durable: false });
      ch.sendToQueue('node.tags', Buffer.from('t'));
      const m = await ch.get('node.tags', { noAck: false });
      ch.ack(m);
      ch.ack(m); // the same tag twice: no reply, the channel just closes
    },
  };
  for (const [name, op] of Object.entries(cases)) {
    step(name);
    result.cases[name] = await channelError(conn, name, op);
    result.usable[name] = await stillUsable(conn, name);
  }

  step('cleanup');
  const ch = await conn.createChannel();
  await ch.deleteQueue('node.durable-q');
  await ch.deleteQueue('node.tags');
  await ch.close();
  step('close');
  await conn.close();
  return result;
});
