"""MicroPython's own MQTT clients, as sensors run them: micropython-lib's umqtt.simple and
umqtt.robust (from PyPI, fetched by `make test` into build/umqtt) under the `micropython`
command, against hutch: keep alive 0 (umqtt's default), QoS 0 and 1 both ways, and the AMQP
side seeing the readings; umqtt.robust publishing on through a broker killed and restarted
(its reconnect asks for its persistent session)."""

import os
import subprocess

import pika
import pytest
from brokers import sigkill, wait_until
from micropython_env import micropython
from mqtt_brokers import start_hutch, stop

UMQTT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "umqtt")

SIMPLE = """
import sys
sys.path.insert(0, %(umqtt)r)
from umqtt.simple import MQTTClient

got = []
c = MQTTClient(b"umqtt-sensor", "127.0.0.1", port=%(port)d, user=b"guest", password=b"guest")
c.set_callback(lambda topic, msg: got.append((topic, msg)))
c.connect()
c.subscribe(b"cmd/umqtt-sensor", qos=1)
c.publish(b"sensors/umqtt-sensor/temp", b"21.5", qos=1)
c.publish(b"sensors/umqtt-sensor/humidity", b"40", qos=0)
c.publish(b"cmd/umqtt-sensor", b"reboot", qos=1)
while not got:
    c.wait_msg()
print(got)
c.disconnect()
"""

# QoS 0: umqtt.robust 1.0 cannot get past a QoS 1 publish whose PUBACK a dead broker never
# sent (its wait_msg reconnects, then waits on the new connection for that PUBACK for ever);
# at QoS 0 it reconnects from publish and goes on, which is what a restart of the broker asks
ROBUST = """
import sys, time
sys.path.insert(0, %(umqtt)r)
from umqtt.robust import MQTTClient

c = MQTTClient(b"umqtt-robust", "127.0.0.1", port=%(port)d, user=b"guest", password=b"guest")
c.DELAY = 0.2
c.connect(clean_session=False)
for i in range(%(count)d):
    c.publish(b"sensors/robust/seq", b"%%d" %% i)
    print(i)
    time.sleep(0.01)
c.disconnect()
"""


@pytest.fixture
def umqtt():
    assert os.path.exists(os.path.join(UMQTT, "umqtt", "simple.py")), "no umqtt in build/umqtt: make test fetches it"
    return os.path.abspath(UMQTT)


def test_umqtt_simple_as_a_sensor_runs_it(tmp_path, umqtt):
    broker = start_hutch(tmp_path)
    try:
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
        channel = amqp.channel()
        channel.queue_declare("readings")
        channel.queue_bind("readings", "amq.topic", "sensors.#")
        script = tmp_path / "sensor.py"
        script.write_text(SIMPLE % {"umqtt": umqtt, "port": broker.port})
        done = subprocess.run([micropython(), str(script)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == "[(b'cmd/umqtt-sensor', b'reboot')]"
        got = [channel.basic_get("readings", auto_ack=True) for _ in range(2)]
        assert [(m.routing_key, body) for m, _p, body in got] == [
            ("sensors.umqtt-sensor.temp", b"21.5"),
            ("sensors.umqtt-sensor.humidity", b"40"),
        ]
        amqp.close()
        assert "MQTT 3.1.1 connection open (user 'guest', client id 'umqtt-sensor')" in broker.log()
    finally:
        stop(broker)


def test_umqtt_robust_publishes_on_through_a_killed_broker(tmp_path, umqtt):
    broker = start_hutch(tmp_path)
    try:
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
        amqp.channel().queue_declare("seq", durable=True)
        amqp.channel().queue_bind("seq", "amq.topic", "sensors.robust.seq")
        amqp.close()
        script = tmp_path / "robust.py"
        script.write_text(ROBUST % {"umqtt": umqtt, "port": broker.port, "count": 400})
        sensor = subprocess.Popen([micropython(), str(script)], stdout=subprocess.PIPE, text=True)
        for line in sensor.stdout:  # some readings out, then the broker goes
            if int(line) >= 100:
                break
        sigkill(broker.running)
        broker.running.start()
        out, _ = sensor.communicate(timeout=120)
        assert sensor.returncode == 0
        assert out.split()[-1] == "399"
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
        channel = amqp.channel()
        seen = set()
        wait_until(lambda: _drain(channel, seen) and set(range(350, 400)) <= seen, 30, what="the last readings")
        amqp.close()
        log = broker.running.log_since(0)
        assert log.count("client id 'umqtt-robust'") >= 2  # it came back, to its own session
    finally:
        stop(broker)


def _drain(channel, seen):
    while True:
        method, _props, body = channel.basic_get("seq", auto_ack=True)
        if method is None:
            return True
        seen.add(int(body))
