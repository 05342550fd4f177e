"""The status page served at `/` of the metrics port (server/monitoring.py): one HTML page with
its style and script inline (no external asset: it works on a gateway with no internet), which
reads /api/overview every second and draws what RabbitMQ's management overview shows —
the gateway's name, the node (host, version, uptime), its health (core/health.py), a banner
while publishers are blocked, totals, message rates with small charts, queues with their
own rates, connections, MQTT's sessions, bridges, Modbus devices, streams, the journal, memory — read-only. Every figure is an element with a data-figure attribute naming what it
shows, so a test (and a script) can read it.
"""

PAGE = b"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>hutch status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .3em}
table{border-collapse:collapse;background:#fff}td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:right}
th{background:#eee}td:first-child,th:first-child{text-align:left}
.totals{display:flex;flex-wrap:wrap;gap:.6em}.box{background:#fff;border:1px solid #ddd;padding:.4em .8em;min-width:7em}
.box b{display:block;font-size:1.5em}.rate svg{display:block}#state{color:#666}
.bad{color:#b00}.health-degraded{background:#fe9;padding:.4em 1em}.health-failing{background:#fcc;padding:.4em 1em}
.alarm{background:#b00;color:#fff;font-weight:bold;font-size:1.15em;padding:.5em 1em;margin:.5em 0}
</style></head><body>
<h1><span id="gateway">hutch</span> <small id="node"></small></h1><div id="uptime"></div><div id="state">loading...</div>
<div id="blocked" class="alarm" hidden></div>
<div id="health"></div>
<h2>Totals</h2><div class="totals" id="totals"></div>
<h2>Message rates (per second, last minute)</h2><div class="totals" id="rates"></div>
<h2>Queues</h2><table id="queues"></table>
<h2>Connections</h2><table id="connections"></table>
<div id="mqtt-part" hidden><h2>MQTT</h2><div class="totals" id="mqtt"></div>
<h2>MQTT sessions</h2><table id="mqtt-sessions"></table></div>
<h2>Bridges</h2><table id="bridges"></table>
<div id="devices-part" hidden><h2>Devices</h2><table id="devices"></table></div>
<h2>Streams</h2><table id="streams"></table>
<h2>Journal and memory</h2><div class="totals" id="storage"></div>
<script>
"use strict";
var samples = [], KEEP = 60;
var RATES = [["published", ["received"]], ["confirmed", ["confirmed"]],
  ["delivered", ["delivered_consume_manual_ack", "delivered_consume_auto_ack", "delivered_get_manual_ack", "delivered_get_auto_ack"]],
  ["acknowledged", ["acknowledged"]], ["returned", ["returned"]]];
function el(tag, text, figure) {
  var e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (figure) e.setAttribute("data-figure", figure);
  return e;
}
function box(parent, label, value, figure) {
  var b = el("div"); b.className = "box";
  b.appendChild(el("b", value, figure)); b.appendChild(el("span", label)); parent.appendChild(b);
}
function table(id, heads, rows) {
  var t = document.getElementById(id); t.textContent = "";
  var tr = el("tr"); heads.forEach(function (h) { tr.appendChild(el("th", h[0])); }); t.appendChild(tr);
  if (!rows.length) { tr = el("tr"); var td = el("td", "none"); td.colSpan = heads.length; tr.appendChild(td); t.appendChild(tr); }
  rows.forEach(function (row) {
    tr = el("tr");
    heads.forEach(function (h) { tr.appendChild(el("td", row[h[1]] == null ? "-" : row[h[1]], id + "." + row.name + "." + h[1])); });
    t.appendChild(tr);
  });
}
function sum(counters, names) { return names.reduce(function (a, n) { return a + counters[n]; }, 0); }
// a rate as a reader wants it: a sensor's 0.25 msg/s is not 0
function rate(v) { return v <= 0 ? "0" : v < 1 ? v.toFixed(2) : v < 99.95 ? v.toFixed(1) : String(Math.round(v)); }
function duration(s) {
  var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return d ? d + " d " + h + " h" : h ? h + " h " + m + " min" : m ? m + " min" : Math.floor(s) + " s";
}
// each queue's rates, as RabbitMQ's management UI shows them: from its counters' last two samples
var QUEUE_RATES = [["publish_rate", "published"], ["deliver_rate", "delivered"], ["ack_rate", "acknowledged"]];
function queueRates(queues) {
  var now = samples[samples.length - 1], before = samples[samples.length - 2];
  queues.forEach(function (q) {
    var old = before && before.queues[q.name], dt = before ? (now.t - before.t || 1) : 1;
    QUEUE_RATES.forEach(function (r) { q[r[0]] = old ? rate(Math.max(0, q[r[1]] - old[r[1]]) / dt) : "-"; });
  });
}
function spark(values) {
  var w = 120, h = 28, max = Math.max.apply(null, values.concat([1]));
  var pts = values.map(function (v, i) { return (i * w / (KEEP - 1)).toFixed(1) + "," + (h - v * h / max).toFixed(1); });
  return '<svg width="' + w + '" height="' + h + '"><polyline fill="none" stroke="#36c" points="' + pts.join(" ") + '"/></svg>';
}
function draw(data) {
  var b = data.broker, c = b.counters, now = data.at_ms / 1000;
  var byName = {};
  b.queues.forEach(function (q) { byName[q.name] = {published: q.published, delivered: q.delivered, acknowledged: q.acknowledged}; });
  samples.push({t: now, c: c, queues: byName}); if (samples.length > KEEP) samples.shift();
  var node = data.node || {};
  document.getElementById("node").textContent = node.version ? "hutch " + node.version + " on " + node.host : "";
  // the gateway's name ([server] name): the heading, and the browser tab's title
  var gateway = document.getElementById("gateway");
  gateway.textContent = b.name || "hutch";
  gateway.setAttribute("data-figure", "gateway");
  document.title = (b.name || "hutch") + " - hutch status";
  queueRates(b.queues);
  var ready = 0, unacked = 0;
  b.queues.forEach(function (q) { ready += q.messages; unacked += q.unacked; });
  var totals = document.getElementById("totals"); totals.textContent = "";
  box(totals, "connections", b.connections.length, "connections");
  box(totals, "channels", b.channels, "channels");
  box(totals, "queues", b.queues.length + b.streams.length, "queues");
  box(totals, "consumers", b.consumers, "consumers");
  box(totals, "ready", ready, "messages_ready");
  box(totals, "unacked", unacked, "messages_unacked");
  box(totals, "published", c.received, "received");
  box(totals, "confirmed", c.confirmed, "confirmed");
  box(totals, "logins refused", c.auth_attempts_failed, "auth_attempts_failed");
  var rates = document.getElementById("rates"); rates.textContent = "";
  RATES.forEach(function (r) {
    var series = [];
    for (var i = 1; i < samples.length; i++) {
      var dt = samples[i].t - samples[i - 1].t || 1;
      series.push((sum(samples[i].c, r[1]) - sum(samples[i - 1].c, r[1])) / dt);
    }
    var d = el("div"); d.className = "box rate";
    d.appendChild(el("b", rate(series.length ? series[series.length - 1] : 0), "rate." + r[0]));
    d.appendChild(el("span", r[0])); d.insertAdjacentHTML("beforeend", spark(series)); rates.appendChild(d);
  });
  table("queues", [["name", "name"], ["ready", "messages"], ["unacked", "unacked"], ["consumers", "consumers"],
    ["on disk", "on_disk"], ["published", "published"], ["publish/s", "publish_rate"], ["deliver/s", "deliver_rate"],
    ["ack/s", "ack_rate"], ["oldest (s)", "oldest_age_s"]], b.queues);
  table("connections", [["name", "name"], ["protocol", "protocol"], ["user", "user"], ["TLS", "tls"],
    ["channels", "channels"]], b.connections);
  drawMqtt(b);
  table("bridges", [["name", "name"], ["state", "state"], ["window", "window"], ["upstream", "upstream"],
    ["forwarded", "forwarded"], ["in flight", "in_flight"], ["backlog", "backlog"], ["oldest (s)", "oldest_age_s"],
    ["fail-overs", "failovers"], ["alarm", "alarm"], ["last error", "last_error"]], b.bridges);
  drawDevices(b.devices || [], now);
  table("streams", [["name", "name"], ["first", "first"], ["last", "last"], ["bytes", "bytes"], ["consumers", "consumers"]], b.streams);
  var storage = document.getElementById("storage"); storage.textContent = "";
  if (b.journal) {
    box(storage, "journal bytes", b.journal.bytes, "journal_bytes");
    box(storage, "segments", b.journal.segments, "journal_segments");
  }
  box(storage, "fsyncs", c.journal_syncs, "journal_syncs");
  var p = data.process;
  if (p.resident_memory_bytes !== undefined) box(storage, "resident MB", (p.resident_memory_bytes / 1048576).toFixed(1), "resident_mb");
  if (p.heap_free_bytes !== undefined) box(storage, "heap free", p.heap_free_bytes, "heap_free_bytes");
  var state = document.getElementById("state");
  state.className = "";
  state.textContent = "updated " + new Date().toLocaleTimeString();
  state.setAttribute("data-figure", "updated");
  // publishers blocked: a banner with why, as the broker sees it now, and since when
  var blocked = document.getElementById("blocked");
  blocked.hidden = !b.blocked;
  blocked.textContent = b.blocked ? "Publishers blocked for " + duration(b.blocked_for_s || 0) + ": " + b.blocked : "";
  blocked.setAttribute("data-figure", "blocked");
  // the gateway's health (hutch ctl health's): ok, or degraded or failing with why
  var health = data.health || {state: "ok", reasons: []};
  var said = document.getElementById("health");
  said.className = "health-" + health.state;
  said.textContent = "health: " + health.state + (health.reasons.length ? " - " + health.reasons.join("; ") : "");
  said.setAttribute("data-figure", "health");
  document.getElementById("node").setAttribute("data-figure", "node");
  var uptime = document.getElementById("uptime");
  uptime.textContent = node.uptime_s !== undefined ? "up " + duration(node.uptime_s) : "";
  uptime.setAttribute("data-figure", "uptime");
}
// MQTT's part, where a listener serves it: its clients' counters, and its sessions as RabbitMQ
// keeps them, a queue per session and QoS (mqtt-subscription-<client id>qos0|qos1), retained
// messages (mqtt-retained.<key>) and shared subscriptions (mqtt-shared/<group>/<filter>)
// the [[device]]s polled (devices/device.py snapshot): its state, since when, its polls by result
function drawDevices(devices, now) {
  document.getElementById("devices-part").hidden = !devices.length;
  table("devices", [["name", "name"], ["state", "state"], ["for", "for"], ["last poll", "last"], ["polls", "ok"],
    ["failed", "failed"], ["why down", "reason"]], devices.map(function (d) {
    var failed = 0;
    for (var result in d.polls) if (result !== "ok") failed += d.polls[result];
    return {name: d.name, state: d.state, for: d.since == null ? null : duration(now - d.since),
      last: d.last_poll_number == null ? null : "#" + d.last_poll_number, ok: d.polls.ok, failed: failed, reason: d.reason};
  }));
}
function drawMqtt(b) {
  var m = (b.counters_by_protocol || {}).mqtt;
  document.getElementById("mqtt-part").hidden = !m;
  if (!m) return;
  var sessions = {}, connected = {}, open = 0, retained = 0, shared = 0;
  b.connections.forEach(function (c) { if (c.protocol === "mqtt") { open++; if (c.client_id) connected[c.client_id] = true; } });
  function session(id) {
    return sessions[id] || (sessions[id] = {name: id, connected: connected[id] ? "yes" : "no", queued: 0, unacked: 0});
  }
  b.queues.forEach(function (q) {
    var found = /^mqtt-subscription-(.*)qos[01]$/.exec(q.name);
    if (found) { var s = session(found[1]); s.queued += q.messages; s.unacked += q.unacked; }
    else if (q.name.indexOf("mqtt-retained.") === 0) retained++;
    else if (q.name.indexOf("mqtt-shared/") === 0) shared++;
  });
  Object.keys(connected).forEach(session);
  var mqtt = document.getElementById("mqtt"); mqtt.textContent = "";
  box(mqtt, "connections", open, "mqtt.connections");
  box(mqtt, "sessions", Object.keys(sessions).length, "mqtt.sessions");
  box(mqtt, "published", m.received, "mqtt.received");
  box(mqtt, "delivered", m.delivered_consume_manual_ack + m.delivered_consume_auto_ack, "mqtt.delivered");
  box(mqtt, "retained", retained, "mqtt.retained");
  box(mqtt, "shared subscriptions", shared, "mqtt.shared");
  table("mqtt-sessions", [["client id", "name"], ["connected", "connected"], ["queued", "queued"], ["unacked", "unacked"]],
    Object.keys(sessions).sort().map(function (id) { return sessions[id]; }));
}
// The URL without the user and password a user may have typed into the page's address: a
// browser refuses to fetch such a URL, and sends the credentials it logged in with anyway
var OVERVIEW = location.origin + location.pathname.replace(/[^/]*$/, "") + "api/overview";
function poll() {
  fetch(OVERVIEW, {cache: "no-store", credentials: "same-origin"}).then(function (r) { return r.json(); }).then(draw).catch(function (e) {
    var s = document.getElementById("state"); s.className = "bad"; s.textContent = "broker not answering: " + e;
  }).finally(function () { setTimeout(poll, 1000); });
}
poll();
</script></body></html>
"""
