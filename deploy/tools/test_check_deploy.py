"""scripts/check-deploy must fail on a broken deploy/ (run by
`scripts/check-deploy --self-test`).

Each case copies deploy/ into a temporary folder, breaks one thing, runs
scripts/check-deploy on the copy (UNIGEN_DEPLOY_DIR) and requires a non-zero
exit and the finding's text in the output. The unbroken copy must pass.
Prints `N passed, N failed` and exits 1 if any case failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

# (name, file under deploy/, text to replace, replacement, expected output)
CASES = [
    ("an unknown field in a Deployment fails the strict schema",
     "kubernetes/base/api.yaml", "  revisionHistoryLimit: 5", "  revisionHistoryLimit: 5\n  replica: 2",
     "Additional properties are not allowed ('replica' was unexpected)"),
    ("a port of the wrong type fails the schema",
     "kubernetes/base/scheduler.yaml", "containerPort: 9102", 'containerPort: "9102"',
     "'9102' is not of type 'integer'"),
    ("a probe on a route the binary does not serve fails",
     "kubernetes/base/api.yaml", "path: /readyz", "path: /ready",
     "readinessProbe path '/ready' is not a route unigen-api serves"),
    ("a KEDA trigger on a queue no tool has fails",
     "kubernetes/base/worker-video.yaml", "queueName: jobs.video", "queueName: jobs.videos",
     "queueName 'jobs.videos' is not jobs.<tool>"),
    ("a worker group whose --tools differ from its triggers fails",
     "kubernetes/base/worker-audio.yaml", '"tts,stt,music"', '"tts,stt"',
     "consumes --tools ['stt', 'tts']"),
    ("a tool no worker group consumes fails",
     "kubernetes/base/worker-batch.yaml", '"--tools", "batch,responses"', '"--tools", "batches,responses"',
     "batch is consumed by 0 worker Deployments"),
    ("an unknown ScaledObject field fails the structural check",
     "kubernetes/base/worker-image.yaml", "  pollingInterval: 10", "  pollingIntervall: 10",
     "unknown field `pollingIntervall`"),
    ("an overlay patch for a missing resource fails the render",
     "kubernetes/overlays/prod/api-hpa.yaml", "name: unigen-api", "name: unigen-apis",
     "matches 0 resources"),
    ("a migration Job running no CLI subcommand fails",
     "kubernetes/base/migrate-job.yaml", 'args: ["migrate"]', 'args: ["migrations"]',
     "name no unigen-api subcommand"),
    ("an alert without `for` fails",
     "prometheus/alerts.yml", "        for: 15m\n        labels:\n          severity: critical\n        annotations:\n          summary: \"{{ $labels.tool }} jobs are pending",
     "        labels:\n          severity: critical\n        annotations:\n          summary: \"{{ $labels.tool }} jobs are pending",
     "alert UnigenJobsStuckPending: needs `for`"),
    ("an alert with broken PromQL fails promtool check rules",
     "prometheus/alerts.yml", "expr: max by (tool) (unigen_queue_depth) > 200", "expr: max by (tool) (unigen_queue_depth > 200",
     "unclosed left parenthesis"),
    ("an alert whose threshold no longer matches its unit test fails promtool test rules",
     "prometheus/alerts.yml", "> 5400", "> 9000",
     "FAILED"),
    ("a dashboard expression that does not parse fails",
     "grafana/unigen.json", "max by (tool) (unigen_dead_letter_depth", "max by tool (unigen_dead_letter_depth",
     "dashboard:expression_"),
    ("a dashboard series no binary exports fails",
     "grafana/unigen.json", "unigen_queue_consumers{", "unigen_queue_consumer{",
     "reads unigen_queue_consumer, which no binary exports"),
    ("a panel on another datasource fails",
     "grafana/unigen.json", '"uid": "${DS_PROMETHEUS}"', '"uid": "prometheus"',
     "datasource must be ${DS_PROMETHEUS}"),
]


def run(root: str, deploy: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, UNIGEN_DEPLOY_DIR=deploy)
    return subprocess.run([os.path.join(root, "scripts", "check-deploy")], env=env,
                          capture_output=True, text=True, timeout=600)


def main() -> int:
    root = os.path.abspath(sys.argv[1])
    passed = failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        pristine = os.path.join(scratch, "pristine")
        shutil.copytree(os.path.join(root, "deploy"), pristine, ignore=shutil.ignore_patterns("__pycache__"))
        result = run(root, pristine)
        if result.returncode == 0:
            passed += 1
            print("ok: the unbroken copy passes")
        else:
            failed += 1
            print("FAILED: the unbroken copy does not pass:\n" + result.stdout[-2000:] + result.stderr[-2000:])
        for number, (name, path, old, new, expected) in enumerate(CASES):
            copy = os.path.join(scratch, f"case{number}")
            shutil.copytree(pristine, copy)
            target = os.path.join(copy, path)
            with open(target, encoding="utf-8") as handle:
                text = handle.read()
            if old not in text:
                failed += 1
                print(f"FAILED: {name}: the text to break is not in {path} (update the case)")
                continue
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text.replace(old, new, 1))
            result = run(root, copy)
            output = result.stdout + result.stderr
            if result.returncode != 0 and expected in output:
                passed += 1
                print(f"ok: {name}")
            else:
                failed += 1
                print(f"FAILED: {name}: exit {result.returncode}, expected {expected!r} in:\n{output[-3000:]}")
            shutil.rmtree(copy)
    print(f"check-deploy self-test: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
