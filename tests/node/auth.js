'use strict';
// A wrong password: connect() rejects with 403 ACCESS_REFUSED (the broker
// advertises authentication_failure_close); the right one then works.
const { amqp, run } = require('./common');

run('auth', async (url, step) => {
  const bad = new URL(url);
  bad.password = 'wrong-password';
  step('bad login');
  const started = Date.now();
  let refused = null;
  try {
    const conn = await amqp.connect(bad.toString());
    await conn.close();
  } catch (err) {
    refused = { message: err.message, code: err.code };
  }
  const refusedAfterMs = Date.now() - started;
  step('unknown user');
  const stranger = new URL(url);
  stranger.username = 'nobody';
  let unknown = null;
  try {
    const conn = await amqp.connect(stranger.toString());
    await conn.close();
  } catch (err) {
    unknown = { message: err.message, code: err.code };
  }
  step('good login');
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.close();
  await conn.close();
  return { refused, refusedAfterMs, unknown };
});
