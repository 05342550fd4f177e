"""A Celery app with hutch as its broker, and its results sent back over AMQP (rpc://).

    pip install celery
    celery -A celery_app worker --pool=solo          # in examples/: a worker, until Ctrl-C
    python examples/celery_app.py [AMQP_URL]         # or: a worker, three tasks, and stop

AMQP_URL defaults to $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672//. Run as a
script, it starts a worker of this app (`python -m celery -A celery_app worker`), sends
tasks as any producer would, prints their results, and stops the worker (SIGTERM: a warm
shutdown).
"""

import os
import signal
import subprocess
import sys

from celery import Celery

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")

app = Celery("celery_app", broker=URL, backend="rpc://")
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_acks_late=True,  # the worker acks a task once it ran: a crash hands it to another worker
    broker_connection_retry_on_startup=True,
)


@app.task
def add(x, y):
    return x + y


@app.task
def word_count(text):
    return len(text.split())


def main():
    if len(sys.argv) > 1:
        os.environ["AMQP_URL"] = app.conf.broker_url = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo", "--loglevel=WARNING"],
        cwd=here,
        env=dict(os.environ, PYTHONPATH=here),
    )
    try:
        print("add(2, 3) =", add.delay(2, 3).get(timeout=30))
        print("word_count(...) =", word_count.delay("sensors publish to the gateway").get(timeout=30))
        print("sum of add(i, i) for i < 10 =", sum(add.delay(i, i).get(timeout=30) for i in range(10)))
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    print("worker stopped")


if __name__ == "__main__":
    main()
