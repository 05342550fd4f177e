"""The place of the AMQP 1.0 front end, beside the 0-9-1 one (hutch.amqp091) and on the same
broker calls (core/session.py). It holds no code yet: hutch answers a 1.0 protocol header as
every unknown header is answered. The import contracts (pyproject.toml) already keep it and
amqp091 apart, and core below both."""
