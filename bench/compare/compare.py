#!/usr/bin/env python3
"""Same-run comparison: unigen against the tools a user would otherwise use,
measured in one run on one machine, printed as ratios.

  jobs  unigen's async job pipeline (`unigen-bench jobs-throughput`, model
        bench/noop) against Celery running a no-op task (RabbitMQ quorum
        queue, publisher confirms, PostgreSQL result backend): completed
        jobs/s, commits per job.
  sync  one client's round trip: unigen's sync request (`unigen-bench
        sync-overhead --clients 1`, bench/noop, provider latency 0) against
        Celery's apply_async().get().
  chat  the added latency of /chat/completions over calling the same fake
        upstream directly (`unigen-bench chat-overhead`): unigen against a
        LiteLLM proxy (1 worker) on the same `unigen-bench fake-upstream`.

The unigen stack is yours: start it with UNIGEN_CONFIG=bench/unigen-bench.toml
(bench/noop and bench/fake-chat), e.g.

  UNIGEN_CONFIG=bench/unigen-bench.toml scripts/dev-up --release   # prints a key
  python3 bench/compare/compare.py --api http://127.0.0.1:8080/api/v1 --key sk_... \\
      --bench target/release/unigen-bench [--quick] [--json compare.json]

The peers are installed into .venv-compare (created when missing) from
bench/compare/requirements.txt, one group per peer; a peer that cannot be
installed or started is skipped, and the table says why. The script starts
and stops the Celery worker, the fake upstream and LiteLLM itself. The fake
upstream listens on --upstream-port, which must be the port of the stack's
[upstreams.bench] base_url (9400 in bench/unigen-bench.toml). The
organization's plan must allow the load, or the unigen rows count 429s
(see docs/book/src/benchmarks.md: `admin plan set --code business
--rate-limit 10000000 --concurrent 2000 --bucket chat_tokens=unlimited
--bucket image_generations=unlimited`, `admin credits add`).

Standard library only: runs with any python3 >= 3.8.
"""

import argparse
import hashlib
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")


def log(msg):
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------- the venv


def requirement_groups():
    """{group: [requirement lines]} from requirements.txt's `# group:` marks."""
    groups, current = {}, None
    with open(REQUIREMENTS) as f:
        for raw in f:
            line = raw.strip()
            if line.startswith("# group:"):
                current = line.split(":", 1)[1].strip()
                groups[current] = []
            elif line and not line.startswith("#") and current:
                groups[current].append(line)
    return groups


def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def ensure_venv(venv, wanted, no_install):
    """Creates the venv and installs each wanted group once (a stamp per
    group and requirements hash). Returns {group: None if ready, else why not}."""
    status = {}
    if not os.path.exists(venv_python(venv)):
        if no_install:
            return {g: f"no venv at {venv} (--no-install)" for g in wanted}
        log(f"creating the venv {venv}")
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            why = f"python3 -m venv failed: {(r.stderr or r.stdout).strip()[-300:]}"
            return {g: why for g in wanted}
    ignore = os.path.join(venv, ".gitignore")
    if not os.path.exists(ignore):
        # Not for git, wherever the venv is.
        with open(ignore, "w") as f:
            f.write("*\n")
    groups = requirement_groups()
    for group in wanted:
        lines = groups.get(group)
        if not lines:
            status[group] = f"no '# group: {group}' in {REQUIREMENTS}"
            continue
        digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
        stamp = os.path.join(venv, f".compare-{group}-{digest}")
        if os.path.exists(stamp):
            status[group] = None
            continue
        if no_install:
            status[group] = f"{group} not installed in {venv} (--no-install)"
            continue
        log(f"installing {group} into {venv}: {' '.join(lines)}")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            req.write("\n".join(lines) + "\n")
        try:
            r = subprocess.run([venv_python(venv), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                "-r", req.name], capture_output=True, text=True)
        finally:
            os.unlink(req.name)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            status[group] = "pip install failed: " + " | ".join(tail)
            log(status[group])
            continue
        open(stamp, "w").close()
        status[group] = None
    return status


# ------------------------------------------------------------ processes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_http(url, timeout, proc, name, headers=None):
    """Polls url until it answers 2xx; fails early when proc exits."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}")
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2) as resp:
                if 200 <= resp.status < 300:
                    return
        except (urllib.error.URLError, OSError) as err:
            last = err
        time.sleep(0.1)
    raise RuntimeError(f"{name} not ready at {url} after {timeout} s ({last})")


class Service:
    """A process started here, in its own process group, log in a file."""

    def __init__(self, name, cmd, env=None, cwd=None):
        self.name = name
        self.log_path = os.path.join(tempfile.gettempdir(), f"compare-{name}-{os.getpid()}.log")
        self.log_file = open(self.log_path, "w")
        log(f"starting {name}: {' '.join(cmd)} (log {self.log_path})")
        self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log_file.close()


def run_json(cmd, name, env=None, capture_stdout_json=False):
    """Runs a measuring command, its output on stderr. Returns the JSON it
    wrote (to --json FILE, appended here; or on stdout), or raises."""
    log(f"{name}: {' '.join(cmd)}")
    load_before = loadavg()
    if capture_stdout_json:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{name} exited with {r.returncode}")
        data = json.loads(r.stdout.strip().splitlines()[-1])
    else:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
            path = out.name
        try:
            r = subprocess.run(cmd + ["--json", path], env=env, stdout=sys.stderr)
            if r.returncode != 0:
                raise RuntimeError(f"{name} exited with {r.returncode}")
            with open(path) as f:
                data = json.load(f)
        finally:
            os.unlink(path)
    data["_loadavg_before"] = load_before
    data["_loadavg_after"] = loadavg()
    return data


# ------------------------------------------------------------ measurements


def keyed(key):
    """The environment with the API key in UNIGEN_KEY (unigen-bench reads
    it there), so it is not on a command line."""
    return dict(os.environ, UNIGEN_KEY=key)


def unigen_jobs(args):
    cmd = [args.bench, "jobs-throughput", "--api", args.api, "--model", "bench/noop",
           "--duration", str(args.jobs_seconds), "--in-flight", str(args.in_flight),
           "--pg-database", args.pg_database, "--no-pgbench", "--label", "compare"]
    return run_json(cmd, "unigen jobs-throughput", env=keyed(args.key))


def unigen_sync(args):
    cmd = [args.bench, "sync-overhead", "--api", args.api, "--model", "bench/noop",
           "--clients", "1", "--duration", str(args.sync_seconds), "--provider-latency-ms", "0"]
    return run_json(cmd, "unigen sync-overhead", env=keyed(args.key))


def celery_run(args):
    cmd = [venv_python(args.venv), os.path.join(HERE, "celery_bench.py"),
           "--vhost", args.celery_vhost, "--db", args.celery_db, "--queue", args.celery_queue,
           "--tasks", str(args.celery_tasks), "--roundtrip-seconds", str(args.sync_seconds),
           "--get-interval", str(args.celery_get_interval)]
    if args.celery_concurrency:
        cmd += ["--concurrency", str(args.celery_concurrency)]
    return run_json(cmd, "celery", capture_stdout_json=True)


def chat_overhead(args, api, key, model, name):
    cmd = [args.bench, "chat-overhead", "--api", api, "--model", model,
           "--upstream", f"http://127.0.0.1:{args.upstream_port}/v1", "--upstream-model", "bench",
           "--rates", args.rates, "--duration", str(args.chat_seconds)]
    return run_json(cmd, name, env=keyed(key))


LITELLM_CONFIG = """\
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench
      api_base: http://127.0.0.1:{port}/v1
      api_key: fake
litellm_settings:
  telemetry: false
general_settings:
  master_key: {key}
"""


def litellm_run(args):
    port = args.litellm_port or free_port()
    key = "sk-compare-" + secrets.token_hex(8)
    cfg = tempfile.NamedTemporaryFile("w", prefix="compare-litellm-", suffix=".yaml", delete=False)
    cfg.write(LITELLM_CONFIG.format(port=args.upstream_port, key=key))
    cfg.close()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    # No fetch of the model price map from the internet; quiet logs.
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR", PYTHONUNBUFFERED="1")
    litellm = os.path.join(args.venv, "bin", "litellm")
    service = Service("litellm", [litellm, "--config", cfg.name, "--host", "127.0.0.1", "--port", str(port),
                                  "--num_workers", "1", "--telemetry", "False"], env=env)
    try:
        started = time.monotonic()
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", 180, service.proc, "LiteLLM")
        log(f"LiteLLM ready after {time.monotonic() - started:.1f} s")
        result = chat_overhead(args, f"http://127.0.0.1:{port}/v1", key, "bench", "litellm chat-overhead")
        version = subprocess.run([venv_python(args.venv), "-c",
                                  "import importlib.metadata as m; print(m.version('litellm'))"],
                                 capture_output=True, text=True).stdout.strip()
        result["_litellm"] = version
        return result
    finally:
        service.stop()
        os.unlink(cfg.name)


# ------------------------------------------------------------ the table


def rate_rows(chat):
    return {r["rate"]: r for r in (chat or {}).get("results", [])}


def build_rows(res):
    """[(section, metric, unigen, peer name, peer, better: 'higher'|'lower')]"""
    rows = []
    uj, us, cel = res.get("unigen_jobs"), res.get("unigen_sync"), res.get("celery")
    jobs = (uj or {}).get("results") or {}
    pipe = jobs.get("pipeline") or {}
    commits = (jobs.get("postgres") or {}).get("commits") or {}
    ct = (cel or {}).get("throughput") or {}
    rows.append(("jobs", "async no-op jobs/s", pipe.get("jobs_per_second"), "celery", ct.get("tasks_per_second"),
                 "higher"))
    rows.append(("jobs", "commits per job (its database)", commits.get("commits_per_job"), "celery",
                 ct.get("commits_per_task"), "lower"))
    # Errors are rows of their own when there are any (a plan's rate limit, say).
    jerr = (jobs.get("submit_errors") or 0) + (jobs.get("failed") or 0) if jobs else None
    cerr = (ct.get("publish_errors") or 0) + (ct.get("published", 0) - ct.get("completed", 0)) if ct else None
    if jerr or cerr:
        rows.append(("jobs", "submit errors + failed jobs", jerr, "celery", cerr, "lower"))
    sync = ((us or {}).get("results") or [{}])[0]
    crt = (cel or {}).get("roundtrip") or {}
    rows.append(("sync", "round trip p50 ms, 1 client", sync.get("p50_ms"), "celery", crt.get("p50_ms"), "lower"))
    rows.append(("sync", "round trip p99 ms, 1 client", sync.get("p99_ms"), "celery", crt.get("p99_ms"), "lower"))
    if sync.get("errors"):
        rows.append(("sync", "round trip errors", sync.get("errors"), "celery", 0 if crt else None, "lower"))
    uc, lc = rate_rows(res.get("unigen_chat")), rate_rows(res.get("litellm_chat"))
    for rate in sorted(set(uc) | set(lc)):
        u, p = uc.get(rate, {}), lc.get(rate, {})
        for q in ("p50", "p99"):
            rows.append(("chat", f"added {q} ms at {rate} req/s",
                         (u.get("added") or {}).get(f"{q}_ms"), "litellm",
                         (p.get("added") or {}).get(f"{q}_ms"), "lower"))
        ue = (u.get("api") or {}).get("errors")
        pe = (p.get("api") or {}).get("errors")
        if ue or pe:
            rows.append(("chat", f"errors at {rate} req/s", ue, "litellm", pe, "lower"))
    return [r for r in rows if r[2] is not None or r[4] is not None]


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    return f"{v:.1f}" if abs(v) >= 100 else f"{v:.2f}"


def ratio(u, p):
    if u is None or p is None or u <= 0 or p <= 0:
        return None
    return u / p


def favours(u, p, better, peer):
    if u is None or p is None or u == p:
        return "-"
    return "unigen" if (u > p) == (better == "higher") else peer


def table(rows):
    head = ("", "metric", "unigen", "peer", "peer value", "unigen/peer", "better")
    lines = [head]
    for section, metric, u, peer, p, better in rows:
        r = ratio(u, p)
        shown = "-" if not r else f"{r:.1f}x" if r >= 10 else f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"
        lines.append((section, metric, fmt(u), peer, fmt(p), shown,
                      favours(u, p, better, peer) + f" ({better} wins)"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = []
    for n, row in enumerate(lines):
        out.append("  ".join(c.ljust(w) if i < 2 or i == 3 or i == 6 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# ------------------------------------------------------------ main


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--api", default="http://127.0.0.1:8080/api/v1", help="unigen's API base URL")
    p.add_argument("--key", default=os.environ.get("UNIGEN_KEY"),
                   help="unigen API key with all scopes (default: $UNIGEN_KEY)")
    p.add_argument("--bench", default=os.path.join(ROOT, "target", "release", "unigen-bench"),
                   help="the unigen-bench binary")
    p.add_argument("--unigen-build", default=None,
                   help="the stack's build profile, for the report (default: guessed from --bench's path)")
    p.add_argument("--quick", action="store_true", help="short passes (about 2 minutes without installs)")
    p.add_argument("--only", default="jobs,sync,chat", help="sections to run, comma-separated")
    p.add_argument("--json", help="also write everything measured, and the rows, to this file")
    p.add_argument("--venv", default=os.path.join(ROOT, ".venv-compare"))
    p.add_argument("--no-install", action="store_true", help="use the venv as it is; skip missing peers")
    p.add_argument("--pg-database", default="unigen",
                   help="the stack's database, for commits per job (jobs-throughput --pg-database)")
    p.add_argument("--in-flight", type=int, default=32, help="jobs-throughput's concurrent submitters")
    p.add_argument("--celery-tasks", type=int, help="no-op tasks (default 10000; --quick 2000)")
    p.add_argument("--celery-concurrency", type=int, help="worker processes (default: CPUs, Celery's default)")
    p.add_argument("--celery-get-interval", type=float, default=0.01,
                   help="AsyncResult.get() polling interval, s (Celery's default 0.5 adds up to that)")
    p.add_argument("--celery-vhost", default="compare", help="RabbitMQ vhost (created, then deleted)")
    p.add_argument("--celery-db", default="compare_celery", help="Celery's result database (created)")
    p.add_argument("--celery-queue", default="compare.celery")
    p.add_argument("--upstream-port", type=int, default=9400,
                   help="the fake upstream's port: the stack's [upstreams.bench] base_url")
    p.add_argument("--litellm-port", type=int, default=0, help="LiteLLM's port (default: a free one)")
    p.add_argument("--chat-model", default="bench/fake-chat", help="unigen's model on the fake upstream")
    p.add_argument("--rates", help="chat request rates, comma-separated (default 20,100; --quick 20)")
    args = p.parse_args()

    if not args.key:
        p.error("--key (or UNIGEN_KEY) is required")
    if not os.access(args.bench, os.X_OK):
        p.error(f"{args.bench} is not an executable unigen-bench (cargo build --release -p unigen-bench)")
    q = args.quick
    args.jobs_seconds = 5 if q else 15
    args.sync_seconds = 5 if q else 10
    args.chat_seconds = 5 if q else 10
    args.celery_tasks = args.celery_tasks or (2000 if q else 10000)
    args.rates = args.rates or ("20" if q else "20,100")
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    build = args.unigen_build or ("release" if "/release/" in os.path.abspath(args.bench)
                                  else "debug" if "/debug/" in os.path.abspath(args.bench) else "unknown")

    meta = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs, {cpu_model()}",
        "unigen_build": build,
        "bench": os.path.abspath(args.bench),
        "api": args.api,
        "quick": q,
        "loadavg_start": loadavg(),
    }
    log(f"{meta['machine']}; unigen build {build}; load average {meta['loadavg_start']}")

    wanted = []
    if sections & {"jobs", "sync"}:
        wanted.append("celery")
    if "chat" in sections:
        wanted.append("litellm")
    peers = ensure_venv(args.venv, wanted, args.no_install)
    res, skipped = {}, {}

    def attempt(key, fn, *a):
        try:
            res[key] = fn(*a)
        except Exception as err:  # noqa: BLE001 - one side failing skips its rows
            skipped[key] = str(err)
            log(f"{key} skipped: {err}")

    if "jobs" in sections:
        attempt("unigen_jobs", unigen_jobs, args)
    if "sync" in sections:
        attempt("unigen_sync", unigen_sync, args)
    if sections & {"jobs", "sync"}:
        if peers.get("celery"):
            skipped["celery"] = peers["celery"]
        else:
            attempt("celery", celery_run, args)

    if "chat" in sections:
        upstream = None
        try:
            if port_taken(args.upstream_port):
                raise RuntimeError(f"port {args.upstream_port} is taken: stop what listens there, "
                                   "or give --upstream-port (and the stack's [upstreams.bench] base_url)")
            upstream = Service("fake-upstream", [args.bench, "fake-upstream", "--port", str(args.upstream_port)])
            wait_http(f"http://127.0.0.1:{args.upstream_port}/v1/models", 30, upstream.proc, "fake-upstream")
            attempt("unigen_chat", chat_overhead, args, args.api, args.key, args.chat_model,
                    "unigen chat-overhead")
            if peers.get("litellm"):
                skipped["litellm_chat"] = peers["litellm"]
            else:
                attempt("litellm_chat", litellm_run, args)
        except Exception as err:  # noqa: BLE001
            skipped["chat"] = str(err)
            log(f"chat skipped: {err}")
        finally:
            if upstream:
                upstream.stop()

    meta["loadavg_end"] = loadavg()
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = build_rows(res)

    cel = res.get("celery") or {}
    print()
    print(f"unigen vs peers, same run, {meta['started']} .. {meta['finished']}")
    print(f"machine: {meta['machine']}; unigen build: {build}; "
          f"load average at start {meta['loadavg_start']}, at end {meta['loadavg_end']}")
    if cel:
        print(f"celery {cel.get('celery')}: {cel.get('worker_concurrency')} prefork processes, quorum queue, "
              f"publisher confirms, PostgreSQL results, acks_late={cel.get('acks_late')}; "
              f"{(cel.get('throughput') or {}).get('tasks')} tasks from "
              f"{(cel.get('throughput') or {}).get('submitters')} publishing threads; "
              f"get(interval={args.celery_get_interval})")
    if res.get("litellm_chat"):
        print(f"litellm {res['litellm_chat'].get('_litellm')} proxy, 1 worker, on the same fake upstream")
    ran = {"jobs": f"jobs-throughput --model bench/noop --in-flight {args.in_flight} --duration {args.jobs_seconds}",
           "sync": f"sync-overhead --clients 1 --model bench/noop --duration {args.sync_seconds}",
           "chat": f"chat-overhead --rates {args.rates} --duration {args.chat_seconds}"}
    print("unigen-bench: " + "; ".join(cmd for s, cmd in ran.items() if s in sections))
    print()
    print(table(rows))
    for key, why in skipped.items():
        print(f"skipped {key}: {why}")
    loads = {k: [v.get("_loadavg_before"), v.get("_loadavg_after")] for k, v in res.items() if isinstance(v, dict)}
    print("load average before/after each pass: " + "; ".join(f"{k} {v[0]} -> {v[1]}" for k, v in loads.items()))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [dict(zip(("section", "metric", "unigen", "peer", "peer_value",
                                                         "better"), r)) for r in rows],
                       "skipped": skipped, "raw": res}, f, indent=2)
        log(f"wrote {args.json}")
    return 0 if res else 1


if __name__ == "__main__":
    sys.exit(main())
