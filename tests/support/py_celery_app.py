"""The Celery app the interop tests run a real worker with (tests/interop/clients/test_celery.py).

The worker subprocess imports this module (`celery -A py_celery_app worker`)
and reads the broker URL from HUTCH_BROKER_URL. The test process does not run
these tasks: it builds a task-less client with make_client(broker.url) and
sends tasks by name, as a separate producer would. Results travel back over
AMQP with the rpc:// backend, so everything goes through hutch.
"""

import os

from celery import Celery

CONFIG = dict(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    broker_connection_timeout=5,
    # AMQP heartbeats of 2 s: exercises hutch's heartbeats with py-amqp, and wakes the
    # worker's event loop every second so it notices SIGTERM quickly (it polls up to 10 s
    # when nothing is due).
    broker_heartbeat=2,
    worker_prefetch_multiplier=4,
    task_acks_late=True,  # acks after the task ran: exercises unacked deliveries
    result_persistent=False,
    worker_hijack_root_logger=False,
)


def make_client(broker_url):
    app = Celery("hutch-test-client", broker=broker_url, backend="rpc://", set_as_current=False)
    app.conf.update(CONFIG)
    return app


app = Celery(
    "py_celery_app", broker=os.environ.get("HUTCH_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"), backend="rpc://"
)
app.conf.update(CONFIG)


@app.task(name="hutch.add")
def add(x, y):
    return x + y


@app.task(name="hutch.fail")
def fail(message):
    raise ValueError(message)


@app.task(name="hutch.echo")
def echo(value):
    return value


@app.task(name="hutch.flaky", bind=True, max_retries=3)
def flaky(self, fail_times):
    # Celery re-publishes the task with an ETA; the worker holds it unacked until then.
    if self.request.retries < fail_times:
        raise self.retry(countdown=0.2)
    return self.request.retries
