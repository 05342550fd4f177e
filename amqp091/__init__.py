"""The AMQP 0-9-1 front end: a connection (bytes in, bytes out), its handshake, its channels
and their methods by class (basic, declare, confirms, tx), on the broker's protocol-neutral
calls (hutch.core.broker)."""
