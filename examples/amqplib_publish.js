// Node's amqplib against hutch: publish with confirms, consume with acks.
//
//   npm install amqplib
//   node examples/amqplib_publish.js [AMQP_URL]
//
// AMQP_URL defaults to $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/.
'use strict';
const amqp = require('amqplib');

async function main() {
  const url = process.argv[2] || process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/';
  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  await channel.assertQueue('node-readings', { durable: true });
  for (let i = 0; i < 5; i++) {
    channel.sendToQueue('node-readings', Buffer.from(`reading ${i}`), { persistent: true });
  }
  await channel.waitForConfirms();
  console.log('published 5 messages, each confirmed');

  let received = 0;
  let consumer;
  await new Promise((resolve) => {
    consumer = channel.consume('node-readings', (message) => {
      channel.ack(message);
      received += 1;
      if (received === 5) resolve();
    });
  });
  await channel.cancel((await consumer).consumerTag);
  console.log(`consumed ${received} messages`);
  await channel.deleteQueue('node-readings');
  await connection.close();
}

main().catch((err) => { console.error(err); process.exit(1); });
