'use strict';
// MQTT.js (npm mqtt) against an MQTT broker: node mqtt_js.js mqtt://user:pass@host:port VERSION
// [FILTER] (4: MQTT 3.1.1, 5: MQTT 5). A subscriber with a persistent session; a publisher at
// QoS 0, 1 and 2; a retained message reaching a later subscription (to FILTER, js/status/# by
// default: RabbitMQ 3.10 gives one to its exact topic only); a will on a cut link; user
// properties (version 5). Prints what the clients observed, as common.js says.
const mqtt = require('mqtt');
const { run, until } = require('./common');

const N = 30;
const version = Number(process.argv[3] || 4);
const retainedFilter = process.argv[4] || 'js/status/#';

// onMessage is attached before the CONNACK: a session's messages may follow it in the same read
function connect(url, clientId, extra, onMessage) {
  return new Promise((resolve, reject) => {
    const client = mqtt.connect(url, Object.assign({ clientId, protocolVersion: version, reconnectPeriod: 0,
      connectTimeout: 10000 }, extra || {}));
    if (onMessage) client.on('message', onMessage);
    client.once('connect', (connack) => resolve([client, connack]));
    client.once('error', reject);
  });
}

const subscribe = (client, topic, qos) => client.subscribeAsync(topic, { qos });
const end = (client) => client.endAsync();

run('mqtt_js', async (url, step, event) => {
  step('connect');
  const [sub, first] = await connect(url, 'js-sub-' + version, { clean: false,
    properties: version === 5 ? { sessionExpiryInterval: 600 } : undefined });
  const got = [];
  sub.on('message', (topic, payload, packet) => got.push({ topic, payload: payload.toString(), qos: packet.qos,
    retain: packet.retain, user: packet.properties && packet.properties.userProperties }));
  const granted = await subscribe(sub, 'js/sensors/#', 2);

  step('publish');
  const [pub] = await connect(url, 'js-pub-' + version);
  for (let i = 0; i < N; i++) {
    const opts = { qos: i % 3 };
    if (version === 5 && i === 0) opts.properties = { userProperties: { unit: 'celsius' } };
    await pub.publishAsync('js/sensors/t' + (i % 3), String(i), opts);
  }
  await until('every message', 10000, () => got.length >= N);

  step('retained');
  await pub.publishAsync('js/status/node-1', 'online', { qos: 1, retain: true });
  const [late] = await connect(url, 'js-late-' + version);
  const retained = [];
  late.on('message', (topic, payload, packet) => retained.push({ topic, payload: payload.toString(), retain: packet.retain }));
  await subscribe(late, retainedFilter, 1);
  await until('the retained message', 10000, () => retained.length >= 1);
  const retainedSeen = retained.slice(); // (the clearing publish below reaches `late` too)
  await pub.publishAsync('js/status/node-1', '', { qos: 1, retain: true }); // cleared for the next run

  step('will');
  const [watcher] = await connect(url, 'js-watcher-' + version);
  const wills = [];
  watcher.on('message', (topic, payload) => wills.push({ topic, payload: payload.toString() }));
  await subscribe(watcher, 'js/will/#', 1);
  const [doomed] = await connect(url, 'js-doomed-' + version, { will: { topic: 'js/will/doomed', payload: 'gone', qos: 1 } });
  doomed.stream.destroy(); // the link goes: no DISCONNECT
  await until('the will', 10000, () => wills.length >= 1);

  step('session');
  await end(sub);
  await pub.publishAsync('js/sensors/away', 'while away', { qos: 1 });
  const later = [];
  const [again, connack] = await connect(url, 'js-sub-' + version, { clean: false,
    properties: version === 5 ? { sessionExpiryInterval: 0 } : undefined }, (topic, payload) => later.push(payload.toString()));
  await until('what came while away', 10000, () => later.length >= 1);
  for (const client of [again, pub, late, watcher]) await end(client);
  if (version === 4) { // (ends the 3.1.1 session, for the next run)
    const [clean] = await connect(url, 'js-sub-' + version, { clean: true });
    await end(clean);
  }
  event({ firstSessionPresent: first.sessionPresent });
  return {
    granted: granted.map((g) => g.qos),
    got: got.map((m) => [m.topic, m.payload, m.qos]),
    user: got[0].user || null,
    retained: retainedSeen,
    wills,
    sessionPresent: connack.sessionPresent,
    later,
  };
});
