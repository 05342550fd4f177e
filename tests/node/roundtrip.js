'use strict';
// connect; assertExchange/assertQueue/bindQueue; publish N messages with
// properties; consume them with manual acks; cancel; delete; close cleanly.
const { amqp, run, until, watch, body } = require('./common');

const N = 200;

run('roundtrip', async (url, step, event) => {
  step('connect');
  const conn = await amqp.connect(url);
  watch('connection', conn, event);
  const server = conn.connection.serverProperties;
  step('createChannel');
  const ch = await conn.createChannel();
  watch('channel', ch, event);

  step('declare');
  const exchange = await ch.assertExchange('node.direct', 'direct', { durable: false });
  const queue = await ch.assertQueue('node.work', { durable: false });
  const bound = await ch.bindQueue('node.work', 'node.direct', 'work');
  const serverNamed = await ch.assertQueue('', { exclusive: true });

  step('publish');
  const properties = {
    contentType: 'application/octet-stream',
    contentEncoding: 'binary',
    headers: { source: 'amqplib', n: 42, big: 2 ** 40, ratio: 0.5, flag: true, nested: { a: 'b' }, list: [1, 'two'] },
    correlationId: 'corr-1',
    replyTo: 'reply-q',
    appId: 'hutch-tests',
    type: 'reading',
    userId: 'guest',
    timestamp: 1700000000,
    persistent: false,
  };
  const written = [];
  for (let i = 0; i < N; i++) {
    written.push(ch.publish('node.direct', 'work', body(i), Object.assign({ messageId: String(i) }, properties)));
  }

  step('consume');
  const received = [];
  let first = null;
  const ok = await ch.consume('node.work', (msg) => {
    if (first === null) first = { fields: msg.fields, properties: msg.properties };
    received.push({ id: msg.properties.messageId, body: msg.content.toString('base64'), redelivered: msg.fields.redelivered });
    ch.ack(msg);
  }, { noAck: false });
  await until(`${N} deliveries`, 10000, () => received.length >= N);
  step('cancel');
  await ch.cancel(ok.consumerTag);
  const after = await ch.checkQueue('node.work');

  step('delete');
  const deleted = await ch.deleteQueue('node.work');
  await ch.deleteExchange('node.direct');
  step('close channel');
  await ch.close();
  step('close connection');
  await conn.close();
  step('closed');
  return {
    server: { product: server.product, platform: server.platform, capabilities: server.capabilities },
    exchange, queue, bound: bound !== undefined, serverNamed,
    written: written.every((w) => w === true),
    consumerTag: ok.consumerTag,
    first: {
      exchange: first.fields.exchange, routingKey: first.fields.routingKey, deliveryTag: first.fields.deliveryTag,
      consumerTag: first.fields.consumerTag, redelivered: first.fields.redelivered,
      properties: Object.assign({}, first.properties, { headers: first.properties.headers }),
    },
    received, after, deleted,
  };
});
