"""A stream record as a row: the source's fixed schema (like Kafka's), the delivery a record
arrives as turned into a tuple in its column order, and rows handed to Spark as Arrow batches."""

import datetime
import json

from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructField, StructType, TimestampType

from hutch.codec.wire import Decimal, Timestamp

from .broker import OFFSET_HEADER

# stream STRING, offset LONG, timestamp TIMESTAMP, routing_key STRING, exchange STRING,
# headers MAP<STRING, STRING>, properties MAP<STRING, STRING>, body BINARY
SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("routing_key", StringType()),
        StructField("exchange", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
    ]
)


def row(stream, offset, message):
    """The row of the record at offset, delivered as message (a hutch.client Message)."""
    properties = dict(message.properties)
    headers = properties.pop("headers", None) or {}
    return (
        stream,
        offset,
        _timestamp(properties.get("timestamp")),
        message.routing_key,
        message.exchange,
        # x-stream-offset is the offset column already; the rest is what the publisher sent
        dict((key, text(value)) for key, value in headers.items() if key != OFFSET_HEADER),
        dict((key, text(value)) for key, value in properties.items()),
        bytes(message.body),
    )


# Rows per Arrow batch a task hands to Spark: big enough that the per-batch work is small,
# small enough that a batch of large bodies stays a few MB.
ROWS_PER_BATCH = 4096


def arrow_batches(rows):
    """The rows (tuples in SCHEMA's order) as pyarrow RecordBatches of the Arrow schema Spark
    expects for SCHEMA. Spark takes tuples too, but then converts every value of every
    row in Python (45 us a row here, three times what reading the record costs); pyarrow
    builds a column at a time in C (8 us a row)."""
    import pyarrow
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(SCHEMA, timezone="UTC")
    chunk = []
    for one in rows:
        chunk.append(one)
        if len(chunk) == ROWS_PER_BATCH:
            yield _batch(pyarrow, chunk, arrow_schema)
            chunk = []
    if chunk:
        yield _batch(pyarrow, chunk, arrow_schema)


def _batch(pyarrow, rows, arrow_schema):
    columns = zip(*rows)
    arrays = [pyarrow.array(column, type=field.type) for column, field in zip(columns, arrow_schema)]
    return pyarrow.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _timestamp(seconds):
    """The message's AMQP timestamp property (seconds, set by its publisher), or None.

    Neither broker hands a consumer the time it stored a record at over AMQP 0-9-1 (hutch keeps
    it per record, RabbitMQ per chunk; both only use it for x-stream-offset timestamps), so the
    publisher's stamp is the best the delivery carries."""
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


def text(value):
    """A header or property value as a string: strings as they are, bytes as UTF-8 (undecodable
    bytes as \\x escapes), the rest as JSON writes it (numbers, true/false, tables, arrays;
    a timestamp as its seconds, a decimal as a string such as "12.34")."""
    if value is None or isinstance(value, str):
        return value
    plain = _plain(value)
    return plain if isinstance(plain, str) else json.dumps(plain)


def _plain(value):
    """value with AMQP's types made JSON's."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, Timestamp):
        return value.seconds
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, dict):
        return dict((key, _plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _decimal(value):
    digits = "%d" % abs(value.value)
    if value.scale:
        digits = digits.rjust(value.scale + 1, "0")
        digits = digits[: -value.scale] + "." + digits[-value.scale :]
    return ("-" if value.value < 0 else "") + digits
