"""The Celery side of bench/compare: runs in the comparison's venv, starts a
Celery worker on bench/compare/celery_app.py, measures, stops it, and prints
its results as JSON on stdout (progress on stderr).

  1. throughput (a fresh worker): --tasks no-op tasks published by
     --submitters threads as fast as publisher confirms allow; completed
     tasks/s over [first publish, last date_done], the publish -> date_done
     lag, and commits per task in the result database (pg_stat_database,
     read with the worker stopped, minus this script's own statements);
  2. round trip at 1 client (a second worker, 50 tasks of warm-up):
     apply_async() then AsyncResult.get(interval=...) in a loop for
     --roundtrip-seconds (after one second unrecorded). In the client,
     Celery's database backend uses SQLAlchemy's NullPool: every poll of
     get() opens a PostgreSQL connection.

compare.py runs it; on its own:
  .venv-compare/bin/python bench/compare/celery_bench.py --tasks 2000
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(f"[celery] {msg}", file=sys.stderr, flush=True)


def quantile(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def ensure_vhost(vhost):
    """Creates the RabbitMQ vhost with rabbitmqctl when missing; True when it
    was created here (and is deleted at the end). With quorum queues Celery
    5.5+ declares 28 celery_delayed_* queues and exchanges for native delayed
    delivery: a vhost of its own keeps them away from everything else."""
    try:
        out = subprocess.run(["rabbitmqctl", "-q", "list_vhosts"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeError(f"rabbitmqctl unavailable ({err}); give --vhost / to use the default vhost")
    if out.returncode != 0:
        raise RuntimeError(f"rabbitmqctl list_vhosts failed: {out.stderr.strip()}")
    if vhost in out.stdout.split():
        return False
    log(f"creating RabbitMQ vhost {vhost}")
    for cmd in (["add_vhost", vhost], ["set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"]):
        r = subprocess.run(["rabbitmqctl", "-q", *cmd], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(cmd)} failed: {r.stderr.strip()}")
    return True


def delete_vhost(vhost):
    r = subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        log(f"could not delete vhost {vhost}: {r.stderr.strip()}")


def ensure_database(pg_base, name):
    import psycopg2

    conn = psycopg2.connect(pg_base + "/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if cur.fetchone() is None:
            log(f"creating database {name}")
            cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()


class Worker:
    """A `celery worker` process on celery_app, started and stopped here."""

    started = 0

    def __init__(self, args, env):
        Worker.started += 1
        self.ready_file = tempfile.NamedTemporaryFile(prefix="compare-ready-", delete=False).name
        os.unlink(self.ready_file)
        env = dict(env, COMPARE_READY_FILE=self.ready_file)
        self.log_path = os.path.join(tempfile.gettempdir(), f"compare-celery-worker-{os.getpid()}-{Worker.started}.log")
        self.log_file = open(self.log_path, "w")
        cmd = [
            sys.executable, "-m", "celery", "-A", "celery_app", "worker",
            "-Q", args.queue, "-c", str(args.concurrency), "-P", "prefork",
            "-l", "WARNING", "-n", f"compare-{os.getpid()}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]
        log(f"starting the worker ({args.concurrency} processes, prefork); log {self.log_path}")
        self.proc = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=self.log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self.ready_file):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Celery worker exited ({self.proc.returncode}); see {self.log_path}")
            time.sleep(0.05)
        raise RuntimeError(f"the Celery worker was not ready after {timeout} s; see {self.log_path}")

    def stop(self):
        if self.proc.poll() is None:
            # Warm shutdown of the worker's process group (its pool children too).
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log_file.close()
        if os.path.exists(self.ready_file):
            os.unlink(self.ready_file)


class Stats:
    """This script's own connection to the result database: counts and
    pg_stat_database readings, each query counted so it can be subtracted."""

    def __init__(self, dsn, db):
        import psycopg2

        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True
        self.db = db
        self.queries = 0

    def run(self, sql, params=()):
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            self.queries += 1

    def one(self, sql, params=()):
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            self.queries += 1
            return cur.fetchone()

    def all(self, sql, params=()):
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            self.queries += 1
            return cur.fetchall()

    def commits(self):
        return self.one("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (self.db,))[0]

    def completed(self):
        return self.one("SELECT count(*) FROM celery_taskmeta WHERE status = 'SUCCESS'")[0]


def roundtrip(noop, seconds, interval):
    """Closed loop at one client: publish, then get() the result."""
    def one():
        t = time.perf_counter()
        noop.apply_async().get(interval=interval, timeout=30)
        return (time.perf_counter() - t) * 1000.0

    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        one()
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(one())
    samples.sort()
    return {
        "clients": 1,
        "requests": len(samples),
        "get_interval_s": interval,
        "p50_ms": quantile(samples, 0.50),
        "p90_ms": quantile(samples, 0.90),
        "p99_ms": quantile(samples, 0.99),
        "max_ms": samples[-1] if samples else None,
    }


def throughput(noop, stats_dsn, db, tasks, submitters, timeout, start_worker):
    """Publishes `tasks` no-op tasks to a fresh worker and waits for them.
    Commits are read with the worker stopped and this script's connection
    closed: a backend's statistics reach pg_stat_database when it exits, an
    idle one's only after up to 10 s."""
    stats = Stats(stats_dsn, db)
    commits_before = stats.commits()  # its own commit, like every later one here, is counted in `own`
    stats.run("TRUNCATE celery_taskmeta")
    worker = start_worker()
    published = {}
    errors = [0]
    lock = threading.Lock()
    counter = iter(range(tasks))

    def submit():
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            t = time.time()
            try:
                r = noop.apply_async()
            except Exception as err:  # noqa: BLE001 - counted, the run goes on
                with lock:
                    errors[0] += 1
                log(f"publish failed: {err}")
                continue
            with lock:
                published[r.id] = t

    try:
        log(f"publishing {tasks} tasks from {submitters} threads")
        start = time.time()
        threads = [threading.Thread(target=submit) for _ in range(submitters)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        publish_seconds = time.time() - start
        log(f"published {len(published)} in {publish_seconds:.2f} s ({errors[0]} errors); waiting for completions")
        expected = len(published)
        last_progress, last_done = time.monotonic(), -1
        while True:
            done = stats.completed()
            if done >= expected:
                break
            if done != last_done:
                last_progress, last_done = time.monotonic(), done
            elif time.monotonic() - last_progress > timeout:
                log(f"no progress for {timeout} s: {done} of {expected} completed")
                break
            time.sleep(0.02)
        rows = stats.all(
            "SELECT task_id, EXTRACT(EPOCH FROM date_done AT TIME ZONE current_setting('TimeZone'))"
            " FROM celery_taskmeta WHERE status = 'SUCCESS'"
        )
        stats.run("TRUNCATE celery_taskmeta")
    finally:
        worker.stop()
        stats.conn.close()
    own = stats.queries  # this script's statements on that connection, each a commit
    after = Stats(stats_dsn, db)
    commits_after = after.commits()
    after.conn.close()
    lags = sorted((float(done) - published[tid]) * 1000.0 for tid, done in rows if tid in published)
    last = max((float(done) for _, done in rows), default=None)
    window = (last - start) if last else None
    completed = len(lags)
    net_commits = commits_after - commits_before - own
    return {
        "tasks": tasks,
        "submitters": submitters,
        "publish_errors": errors[0],
        "published": expected,
        "completed": completed,
        "publish_seconds": round(publish_seconds, 3),
        "publish_per_second": round(expected / publish_seconds, 1) if publish_seconds else None,
        "window_seconds": round(window, 3) if window else None,
        "tasks_per_second": round(completed / window, 1) if window else None,
        "lag_p50_ms": quantile(lags, 0.50),
        "lag_p99_ms": quantile(lags, 0.99),
        "lag_max_ms": lags[-1] if lags else None,
        "commits_per_task": round(net_commits / completed, 2) if completed else None,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672",
                   help="RabbitMQ server (no vhost)")
    p.add_argument("--vhost", default="compare",
                   help="RabbitMQ vhost; created with rabbitmqctl when missing, and then deleted at the end")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432",
                   help="PostgreSQL server (no database)")
    p.add_argument("--db", default="compare_celery", help="result database (created if missing)")
    p.add_argument("--queue", default="compare.celery", help="queue and exchange name (deleted at the end)")
    p.add_argument("--concurrency", type=int, default=os.cpu_count() or 2,
                   help="worker processes (default: the CPUs, Celery's default)")
    p.add_argument("--acks-late", action="store_true", help="task_acks_late (ack after the task ran)")
    p.add_argument("--tasks", type=int, default=10000)
    p.add_argument("--submitters", type=int, default=8, help="publishing threads")
    p.add_argument("--roundtrip-seconds", type=float, default=10)
    p.add_argument("--get-interval", type=float, default=0.01,
                   help="AsyncResult.get() polling interval in seconds (Celery's default: 0.5)")
    p.add_argument("--stall-timeout", type=float, default=60,
                   help="give up waiting when no task completed for this long")
    args = p.parse_args()

    created_vhost = args.vhost != "/" and ensure_vhost(args.vhost)
    broker = f"{args.broker.rstrip('/')}/{'%2f' if args.vhost == '/' else args.vhost}"
    db_url = f"{args.pg.replace('postgresql://', 'postgresql+psycopg2://', 1)}/{args.db}"
    env = dict(os.environ, COMPARE_BROKER_URL=broker, COMPARE_RESULT_DB=db_url,
               COMPARE_QUEUE=args.queue, COMPARE_ACKS_LATE="1" if args.acks_late else "0")
    os.environ.update(env)
    sys.path.insert(0, HERE)
    ensure_database(args.pg, args.db)

    import celery
    import kombu
    from celery_app import app, noop

    result = {
        "celery": celery.__version__, "kombu": kombu.__version__,
        "worker_concurrency": args.concurrency, "acks_late": args.acks_late,
        "vhost": args.vhost, "queue": args.queue, "database": args.db,
    }

    def start_worker():
        worker = Worker(args, env)
        try:
            worker.wait_ready(90)
        except Exception:
            worker.stop()
            raise
        log("worker ready")
        return worker

    try:
        # Celery creates its tables when a session is first set up.
        app.backend.ResultSession().close()
        stats_dsn = f"{args.pg}/{args.db}"
        result["throughput"] = throughput(noop, stats_dsn, args.db, args.tasks, args.submitters,
                                          args.stall_timeout, start_worker)
        log("throughput {tasks_per_second} tasks/s, lag p50 {lag_p50_ms:.1f} ms, p99 {lag_p99_ms:.1f} ms, "
            "{commits_per_task} commits per task".format(**result["throughput"]))
        worker = start_worker()
        try:
            for _ in range(50):
                noop.apply_async().get(interval=args.get_interval, timeout=30)
            log(f"round trip at 1 client for {args.roundtrip_seconds} s (get interval {args.get_interval} s)")
            result["roundtrip"] = roundtrip(noop, args.roundtrip_seconds, args.get_interval)
            log("round trip p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms ({requests} requests)".format(
                **result["roundtrip"]))
        finally:
            worker.stop()
        cleanup = Stats(stats_dsn, args.db)
        cleanup.run("TRUNCATE celery_taskmeta")
        cleanup.conn.close()
    finally:
        if created_vhost:
            delete_vhost(args.vhost)
        else:
            try:
                with kombu.Connection(broker) as conn:
                    ch = conn.default_channel
                    ch.queue_delete(args.queue)
                    ch.exchange_delete(args.queue)
            except Exception as err:  # noqa: BLE001 - cleanup only
                log(f"could not delete queue {args.queue}: {err}")
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
