"""Sensors for tests/interop/spark/test_sensor_to_parquet.py: N sensor clients (hutch.client,
AMQP 0-9-1, each its own thread and connection), each publishing numbered readings until the file STOP exists (at most R)
(Client(sensor_id=...)) as JSON to amq.topic with confirms, through whatever the test does to
their links. Each reading is written to the log once the client has it ("id seq ts value"),
and the next is sent only once it is confirmed: a reading not confirmed is sent again by the
client (republish), on a new connection if need be, until it is.

    python numbered_sensors.py PORT PREFIX SENSORS READINGS LOG FOLDER STOP [T0 [PAUSE_S]]
"""

import json
import os
import random
import sys
import threading
import time

from hutch.client import AMQPError, Client, Returned
from hutch.client.sensor import Sequence

HOST = "127.0.0.1"
CONFIRM_MS = 3000  # a link that confirms nothing for this long is given up (muted, black-holed)


def sensor(port, sensor_id, readings, log, lock, folder, stop, t0, pause, errors):
    rng = random.Random(sensor_id)
    boot_file = os.path.join(folder, sensor_id + ".boot")
    client = Client(HOST, port, sensor_id=sensor_id, sequence=Sequence(boot_file), heartbeat=2, timeout_ms=5000)
    try:
        while True:
            try:
                client.connect()
                client.confirm()
                break
            except (OSError, AMQPError):
                time.sleep(0.1)
        for n in range(1, readings + 1):
            if os.path.exists(stop):
                break
            ts = t0 + n * 10
            value = round(rng.uniform(-10, 40), 2)
            body = json.dumps({"sensor": sensor_id, "ts": ts, "value": value})
            try:  # numbered by the client, and kept by it until confirmed (sent again if need be)
                client.publish("amq.topic", "sensors." + sensor_id, body, {"delivery_mode": 2})
            except (OSError, AMQPError, Returned):
                pass
            seq = client.sequence.high | client.sequence.count
            with lock:
                log.write("%s %d %d %s\n" % (sensor_id, seq, ts, value))
                log.flush()
            while True:
                try:
                    if client.wait_confirms(CONFIRM_MS):
                        break
                except (OSError, AMQPError, Returned):
                    pass
                client._drop()  # lost, or nothing for CONFIRM_MS: the link is dead to us
                while True:
                    try:
                        client.reconnect(republish=True)
                        break
                    except (OSError, AMQPError, Returned):
                        time.sleep(0.1)
            time.sleep(pause)
        client.close()
    except Exception as e:  # anything else fails the run
        errors.append("%s: %r" % (sensor_id, e))


def main(port, prefix, sensors, readings, log_path, folder, stop, t0="1714604400", pause="0.02"):
    run_all(sensor, port, prefix, sensors, readings, log_path, folder, stop, t0, pause)


def run_all(sensor, port, prefix, sensors, readings, log_path, folder, stop, t0, pause):
    """sensor(port, id, readings, log, lock, folder, stop, t0, pause, errors) in a thread for
    each of the sensors PREFIX00, PREFIX01, ...; exit 1 saying what failed, if anything did
    (numbered_paho.py's sensors run here too)."""
    port, sensors, readings, t0, pause = int(port), int(sensors), int(readings), int(t0), float(pause)
    errors = []
    lock = threading.Lock()
    with open(log_path, "a") as log:
        threads = [
            threading.Thread(
                target=sensor, args=(port, "%s%02d" % (prefix, i), readings, log, lock, folder, stop, t0, pause, errors)
            )
            for i in range(sensors)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print("done")


if __name__ == "__main__":
    main(*sys.argv[1:])
