"""Stream queues (x-queue-type stream): the queue (stream.py), its records (streamlog.py) and
what RabbitMQ allows of a stream, in its words (streamrules.py). Loaded with the first stream."""
