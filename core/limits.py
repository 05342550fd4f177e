"""Every resource budget of the broker in one object.

A board profile (boards/) sets these; the core reads them and answers in
protocol terms when one runs out (docs/configuration.md, "[limits]", says what each does):

- frame_max, channel_max: proposed in connection.tune; a larger frame, or one channel
  more than channel_max open at once (whatever their numbers), closes the connection
  (501 / 530);
- max_connections: connection.open beyond it gets 530;
- max_message_bytes: a larger publish closes the channel with 406;
- queue_max_messages / queue_max_bytes: a full queue refuses publishes
  (basic.nack under confirms, otherwise the publisher is paused until it drains);
- total_max_messages / total_max_bytes: all queues together; past it every
  publishing connection is blocked (connection.blocked) until consumers drain
  the broker below the low-water fraction;
- queue_window_messages / queue_window_bytes: what a durable queue keeps in memory
  once its backlog grows; the rest waits in the journal (core/store/paging.py), read back
  page_read_bytes at a time;
- output_high_water: bytes queued towards one client before the broker stops
  delivering to it (a slow consumer cannot eat the heap);
- stream_segment_bytes: a stream's segment file when x-stream-max-segment-size-bytes does
  not say (retention drops whole segments); a stream consumer reads a sixteenth of it
  ahead, at most 64 KiB (core/streams/stream.py);
- handshake_timeout_ms, handshakes_per_source, failed_logins_per_source,
  auth_failure_delay_ms: what a client may cost before it has logged in (core/connections.py);
- amqp10_sessions, amqp10_links: sessions per AMQP 1.0 connection, links per session;
  amqp10_session_window: transfer frames a 1.0 client may send before the session says it
  may send more; amqp10_link_credit: messages a 1.0 sender may send before its link is
  given more credit (amqp10/: RabbitMQ 4's 64, 256, 400 and 170);
- max_sensors, sensor_window: the sensors whose readings are deduplicated by their
  x-sensor-id and x-sensor-seq (core/dedup.py; 0: none, readings are taken as they come), the
  one first heard from longest ago forgotten to make room; and how far behind a sensor's
  highest number a repeat is still told from a new reading (bits: a sensor's state costs
  about sensor_window / 8 bytes plus its id).
"""

FRAME_MIN_SIZE = 4096


class Limits:
    frame_max = 131072
    channel_max = 2047
    heartbeat = 60
    max_connections = 1000
    max_queues = 10000
    max_exchanges = 1000
    max_bindings = 100000
    max_consumers = 10000
    max_message_bytes = 16 * 1024 * 1024
    queue_max_messages = 1000000
    queue_max_bytes = 256 * 1024 * 1024
    total_max_messages = 2000000
    total_max_bytes = 512 * 1024 * 1024
    low_water_percent = 80
    queue_window_messages = 1024
    queue_window_bytes = 4 * 1024 * 1024
    page_read_bytes = 256 * 1024
    output_high_water = 256 * 1024
    stream_segment_bytes = 16 * 1024 * 1024
    handshake_timeout_ms = 10000
    handshakes_per_source = 256
    failed_logins_per_source = 20
    auth_failure_delay_ms = 1000
    close_timeout_ms = 3000
    amqp10_sessions = 64
    amqp10_links = 256
    amqp10_session_window = 400
    amqp10_link_credit = 170
    max_sensors = 10000
    sensor_window = 1024

    def __init__(self, **overrides):
        for name in overrides:
            if not hasattr(Limits, name) or name.startswith("_"):
                raise ValueError("unknown limit %r" % name)
            value = overrides[name]
            if not isinstance(value, int) or value < 0:
                raise ValueError("limit %s must be a whole number >= 0, not %r" % (name, value))
            setattr(self, name, value)
        if self.frame_max < FRAME_MIN_SIZE:
            raise ValueError("frame_max must be at least %d" % FRAME_MIN_SIZE)
        if not 1 <= self.channel_max <= 65535:
            raise ValueError("channel_max must be between 1 and 65535")
        if self.heartbeat > 65535:
            raise ValueError("heartbeat must fit in 16 bits (seconds)")

    def as_dict(self):
        out = {}
        for name in dir(Limits):
            if not name.startswith("_") and isinstance(getattr(Limits, name), int):
                out[name] = getattr(self, name)
        return out
