"""Sensor readings as JSON, published with hutch's sensor client: what `hutch pipeline` aggregates.

    python examples/sensor_simulator.py [--url URL] [--queue readings] [--stream]
        [--start 2024-05-01T06:00:00Z | --live] [--duration 3600] [--interval 10]

Three sensors, greenhouse-1 and greenhouse-2 warming in the morning sun and a cold store
whose door stands open for a few minutes, 25 minutes in. Each reading is a persistent
message to the default exchange with the routing key QUEUE (so it lands in the queue of
that name), body {"sensor": "greenhouse-1", "ts": "2024-05-01T06:00:00Z", "value": 14.2},
published in confirm mode.

- backdated (the default): readings stamped from --start over --duration seconds, one per
  sensor every --interval seconds, all published at once (an hour: 1,080 readings);
- --live: stamped with the time of publishing, one round every --interval seconds, for
  --duration seconds.

The queue is declared durable, as a gateway's bridge declares its queue, or with --stream as
a stream queue (x-queue-type stream), as `hutch pipeline` reads it (--duration 0: declare it,
publish nothing). URL defaults to
$AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/. The same readings, windowed by 5
minutes, drew docs/pipeline-aggregates.png.
"""

import argparse
import calendar
import json
import math
import os
import random
import sys
import time
from urllib.parse import unquote, urlsplit

from hutch.client.simple import Client

SENSORS = ("greenhouse-1", "greenhouse-2", "cold-store")


def value(sensor, minutes, rng):
    """The reading of a sensor `minutes` into the run."""
    if sensor == "cold-store":
        door_open = 25 <= minutes < 29  # the door stands open: the air warms, then recovers
        return round(3.8 + (3.5 * math.sin(math.pi * (minutes - 25) / 4) if door_open else 0) + rng.gauss(0, 0.15), 2)
    base = 14.0 if sensor == "greenhouse-1" else 12.8
    sun = 8.5 * (1 - math.cos(math.pi * min(minutes, 60) / 120))  # warming through the morning
    return round(base + sun + rng.gauss(0, 0.35), 2)


def iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def connect(url):
    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    client = Client(
        parts.hostname or "127.0.0.1",
        parts.port or 5672,
        unquote(parts.username or "guest"),
        unquote(parts.password or "guest"),
        vhost,
        name="sensor-simulator",
    )
    client.connect()
    return client


def main(argv=None):
    parser = argparse.ArgumentParser(description="publish simulated sensor readings (JSON) to a queue or stream")
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))
    parser.add_argument("--queue", default="readings", help="the queue (routing key) to publish to")
    parser.add_argument("--stream", action="store_true", help="declare the queue as a stream queue")
    parser.add_argument("--start", default="2024-05-01T06:00:00Z", help="the first reading's ts (backdated)")
    parser.add_argument("--live", action="store_true", help="stamp readings with the time they are published")
    parser.add_argument("--duration", type=int, default=3600, help="seconds of readings")
    parser.add_argument("--interval", type=int, default=10, help="seconds between a sensor's readings")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    client = connect(args.url)
    arguments = {"x-queue-type": "stream"} if args.stream else None
    client.declare_queue(args.queue, durable=True, arguments=arguments)
    client.confirm()
    rng = random.Random(args.seed)
    start = time.time() if args.live else calendar.timegm(time.strptime(args.start, "%Y-%m-%dT%H:%M:%SZ"))
    rounds = args.duration // args.interval
    published = 0
    for n in range(rounds):
        if args.live:
            time.sleep(max(0.0, start + n * args.interval - time.time()))
            stamp = time.time()
        else:
            stamp = start + n * args.interval
        minutes = n * args.interval / 60
        for sensor in SENSORS:
            reading = {"sensor": sensor, "ts": iso(stamp), "value": value(sensor, minutes, rng)}
            properties = {"delivery_mode": 2, "content_type": "application/json"}  # 2: persistent
            client.publish("", args.queue, json.dumps(reading).encode(), properties)
            published += 1
        if args.live or n % 30 == 29 or n == rounds - 1:
            if not client.wait_confirms(30000):
                print("sensor-simulator: the broker did not confirm every reading", file=sys.stderr)
                return 1
        if args.live:
            print("%s: %d readings published" % (iso(stamp), len(SENSORS)), flush=True)
    client.close()
    if not published:
        print("declared %s%s; published nothing" % (args.queue, " (a stream)" if args.stream else ""))
        return 0
    last = start + (rounds - 1) * args.interval
    print(
        "published %d readings of %d sensors, ts %s to %s, to %s, every one confirmed"
        % (published, len(SENSORS), iso(start), iso(last), args.queue)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
