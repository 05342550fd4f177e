"""The AMQP 0-9-1 codec that the broker and the sensor client share: the spec table (spec.py),
frames, field tables, method arguments and properties (wire.py), what goes wrong in no protocol's
words (errors.py), and the serial link layer (link.py). Sans-IO; imports nothing of hutch's.
A sensor node installs this package and hutch.client, not the broker."""
