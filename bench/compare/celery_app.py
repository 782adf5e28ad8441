"""The Celery baseline of bench/compare: one no-op task, configured the way
unigen's job pipeline is (a RabbitMQ quorum queue, publisher confirms, the
results in PostgreSQL), so both run "submit, run nothing, store the result".

Configured from the environment (bench/compare/celery_bench.py sets it):
  COMPARE_BROKER_URL    amqp://guest:guest@127.0.0.1:5672/compare
  COMPARE_RESULT_DB     postgresql+psycopg2://postgres@127.0.0.1:5432/compare_celery
  COMPARE_QUEUE         the queue, its exchange and routing key (compare.celery)
  COMPARE_READY_FILE    written when the worker is ready to consume
  COMPARE_ACKS_LATE     1: acknowledge after the task ran (unigen's at-least-once);
                        default 0, Celery's default (acknowledge on receipt)

Everything else is Celery's default: prefork pool, prefetch multiplier 4.
Remote control, events, gossip, mingle and heartbeats are off, so the worker
declares nothing on the broker besides COMPARE_QUEUE and its exchange.
"""

import os

from celery import Celery
from celery.signals import worker_ready
from kombu import Exchange, Queue

QUEUE = os.environ.get("COMPARE_QUEUE", "compare.celery")
RESULT_DB = os.environ.get(
    "COMPARE_RESULT_DB", "postgresql+psycopg2://postgres@127.0.0.1:5432/compare_celery"
)

app = Celery(
    "compare",
    broker=os.environ.get("COMPARE_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/compare"),
    backend="db+" + RESULT_DB,
)
app.conf.update(
    task_queues=(
        Queue(
            QUEUE,
            Exchange(QUEUE, type="topic"),
            routing_key=QUEUE,
            queue_arguments={"x-queue-type": "quorum"},
        ),
    ),
    task_default_queue=QUEUE,
    task_default_exchange=QUEUE,
    task_default_routing_key=QUEUE,
    # Publisher confirms: apply_async returns once RabbitMQ has the message.
    broker_transport_options={"confirm_publish": True},
    broker_connection_retry_on_startup=True,
    task_acks_late=os.environ.get("COMPARE_ACKS_LATE", "0") == "1",
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    # Results stay until the benchmark truncates the table.
    result_expires=None,
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    task_send_sent_event=False,
    # Small pools: PostgreSQL's connections are shared with everything else.
    database_engine_options={"pool_size": 2, "max_overflow": 2},
)


@app.task(name="compare.noop")
def noop():
    """Runs nothing; its result (None) is stored in PostgreSQL."""
    return None


@worker_ready.connect
def _ready(**_kwargs):
    path = os.environ.get("COMPARE_READY_FILE")
    if path:
        with open(path, "w") as f:
            f.write("ready\n")
