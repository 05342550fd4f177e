"""MQTT sensors for tests/interop/spark/test_sensor_to_parquet.py, under the `micropython`
command: N umqtt.robust clients (micropython-lib), taking turns in one process, each
publishing readings at QoS 1 until the file STOP exists (at most R) as JSON with their identity in the payload (x-sensor-id, and
x-sensor-seq from a boot counter in a file, as docs/exactly-once.md shows), through whatever
the test does to their links. Each reading is written to the log before it is first sent.

umqtt.robust sends a reading again when its link fails: publish() reconnects (clean session
0) and publishes it once more, under a new packet id. Its wait_msg() reconnects too and then
waits on the new link for the old PUBACK, for ever (umqtt.robust 1.0); so a lost PUBACK is let
fail the publish instead (wait_msg of umqtt.simple inside publish), which sends it again, and
a link that answers nothing times out (a socket timeout).

    micropython numbered_umqtt.py UMQTT_PATH PORT PREFIX SENSORS READINGS LOG FOLDER STOP [T0 [PAUSE_S]]
"""

import json
import os
import random
import sys
import time

sys.path.insert(0, sys.argv[1])
from umqtt import robust, simple  # noqa: E402

TIMEOUT_S = 3


class Sensor(robust.MQTTClient):
    DELAY = 0.1

    def reconnect(self):
        """As umqtt.robust's, with a socket timeout, and a link cut in the middle of the
        handshake taken as any other failure (umqtt.simple then reads past what came)."""
        while True:
            try:
                simple.MQTTClient.connect(self, False)
                self.sock.settimeout(TIMEOUT_S)
                return
            except (OSError, IndexError, AssertionError):
                time.sleep(self.DELAY)

    def wait_msg(self):
        return simple.MQTTClient.wait_msg(self)


def exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def boot_count(path):
    try:
        with open(path) as f:
            boot = int(f.read()) + 1
    except (OSError, ValueError):
        boot = 1
    with open(path, "w") as f:
        f.write(str(boot))
    return boot


def main(umqtt_path, port, prefix, sensors, readings, log_path, folder, stop, t0="1714604400", pause="0.02"):
    port, sensors, readings, t0, pause = int(port), int(sensors), int(readings), int(t0), float(pause)
    clients = []
    for i in range(sensors):
        sensor_id = "%s%02d" % (prefix, i)
        c = Sensor(sensor_id.encode(), "127.0.0.1", port=port, user=b"guest", password=b"guest")
        c.boot = boot_count("%s/%s.boot" % (folder, sensor_id))
        c.sensor_id = sensor_id
        c.reconnect()  # clean session 0, as robust's reconnect asks
        clients.append(c)
    log = open(log_path, "a")
    for n in range(1, readings + 1):
        if exists(stop):
            break
        for c in clients:
            seq = c.boot << 32 | n
            ts = t0 + n * 10
            value = random.randint(-1000, 4000) / 100
            body = json.dumps(
                {"x-sensor-id": c.sensor_id, "x-sensor-seq": seq, "sensor": c.sensor_id, "ts": ts, "value": value}
            )
            log.write("%s %d %d %s\n" % (c.sensor_id, seq, ts, value))
            log.flush()
            c.publish(b"sensors/" + c.sensor_id.encode(), body.encode(), qos=1)
        time.sleep(pause)
    log.close()
    for c in clients:
        c.disconnect()
    print("done")


main(*sys.argv[1:])
