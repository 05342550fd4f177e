"""MQTT 5 sensors for the field day (tests/interop/bridge/test_field_day.py): N Eclipse Paho
clients in one process, each publishing numbered readings at QoS 1 until the file STOP exists
(at most R), their identity as the user properties x-sensor-id and x-sensor-seq (a boot
counter in a file, as docs/exactly-once.md shows). Each reading is written to the log before
it is first sent, and the next is sent only once it is acknowledged: one not acknowledged
within TIMEOUT_S (its broker killed, its link gone) is published again, under the same number,
for the broker to take once. Paho reconnects by itself.

    python numbered_paho.py PORT PREFIX SENSORS READINGS LOG FOLDER STOP [T0 [PAUSE_S]]
"""

import json
import os
import random
import sys
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

TIMEOUT_S = 3


def boot_count(path):
    try:
        with open(path) as f:
            boot = int(f.read()) + 1
    except (OSError, ValueError):
        boot = 1
    with open(path, "w") as f:
        f.write(str(boot))
    return boot


def sensor(port, sensor_id, readings, log, lock, folder, stop, t0, pause, errors):
    try:
        run(port, sensor_id, readings, log, lock, folder, stop, t0, pause)
    except Exception as e:  # anything else fails the run
        errors.append("%s: %r" % (sensor_id, e))


def run(port, sensor_id, readings, log, lock, folder, stop, t0, pause):
    rng = random.Random(sensor_id)
    boot = boot_count(os.path.join(folder, sensor_id + ".boot"))
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=sensor_id, protocol=mqtt.MQTTv5)
    client.username_pw_set("guest", "guest")
    client.reconnect_delay_set(0.1, 1)
    while True:
        try:
            client.connect("127.0.0.1", port, keepalive=5, clean_start=True)
            break
        except OSError:
            time.sleep(0.2)
    client.loop_start()
    for n in range(1, readings + 1):
        if os.path.exists(stop):
            break
        seq = boot << 32 | n
        ts = t0 + n * 10
        value = round(rng.uniform(-10, 40), 2)
        with lock:
            log.write("%s %d %d %s\n" % (sensor_id, seq, ts, value))
            log.flush()
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("x-sensor-id", sensor_id), ("x-sensor-seq", str(seq))]
        body = json.dumps({"sensor": sensor_id, "ts": ts, "value": value})
        given_up = time.monotonic() + 120  # (a logged reading is sent until it is acknowledged)
        while time.monotonic() < given_up:
            sent = client.publish("sensors/" + sensor_id, body, qos=1, properties=props)
            try:
                sent.wait_for_publish(TIMEOUT_S)
                if sent.is_published():
                    break
            except (RuntimeError, ValueError):  # not connected now: again, once it is
                time.sleep(0.2)
        time.sleep(pause)
    client.loop_stop()
    client.disconnect()


def main(port, prefix, sensors, readings, log_path, folder, stop, t0="1714604400", pause="0.5"):
    from numbered_sensors import run_all  # (beside this file)

    run_all(sensor, port, prefix, sensors, readings, log_path, folder, stop, t0, pause)


if __name__ == "__main__":
    main(*sys.argv[1:])
