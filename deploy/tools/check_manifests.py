"""Validates deploy/kubernetes offline (run by scripts/check-deploy).

For the base, both overlays and the optional monitoring folder:
  1. render it (kustomize_render; with a real kustomize too when one is on
     the PATH, and the two renders must agree document for document);
  2. validate every built-in resource against the OpenAPI schemas of
     Kubernetes KUBERNETES_VERSION that the pinned kubernetes-validate ships,
     strictly (unknown fields are errors);
  3. check the custom resources (KEDA's ScaledObject and
     TriggerAuthentication, the Prometheus Operator's PodMonitor)
     structurally: kubernetes-validate has no schema for them and no CRD is
     vendored, so their fields are checked against the KEDA 2.x / operator
     v1 field names here, by hand;
  4. check what ties the manifests to each other and to the code: references
     resolve (ConfigMaps, the Secret, volumes, scale targets, selectors,
     probe ports), probe paths are routes the binaries serve, worker groups
     consume every job queue exactly once and their `--tools` match their
     KEDA triggers, the metrics addresses match the container ports, the
     migration Job runs a subcommand the CLI has.

Usage: check_manifests.py <repo root> [--deploy <deploy folder>] [--kubernetes-version 1.30.0]
Prints one line per finding and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kustomize_render  # noqa: E402

KUBERNETES_VERSION = "1.30.0"
RENDERS = ["base", "overlays/dev", "overlays/prod", "monitoring"]
# The only object an overlay may leave to the cluster: the Secret with the
# real connection strings (prod creates it out of version control).
EXTERNAL = {("Secret", "unigen")}

SCALED_OBJECT_SPEC = {
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
    "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers",
}
SCALE_TARGET_REF = {"name", "apiVersion", "kind", "envSourceContainerName"}
TRIGGER = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}
RABBITMQ_METADATA = {
    "protocol", "queueName", "mode", "value", "activationValue", "host", "hostFromEnv",
    "vhostName", "useRegex", "excludeUnacknowledged", "operation", "timeout", "unsafeSsl",
}
FALLBACK = {"failureThreshold", "replicas", "behavior"}
ADVANCED = {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount", "scalingModifiers"}
HPA_CONFIG = {"behavior", "name"}
TRIGGER_AUTH_SPEC = {"secretTargetRef", "env", "podIdentity", "hashiCorpVault", "azureKeyVault", "configMapTargetRef"}
SECRET_TARGET_REF = {"parameter", "name", "key"}
POD_MONITOR_SPEC = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels", "sampleLimit"}
POD_METRICS_ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "scheme", "honorLabels", "relabelings", "metricRelabelings"}


class Findings:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")


def code_facts(root: str) -> dict:
    """What the manifests must agree with, read from the source."""
    def read(path: str) -> str:
        with open(os.path.join(root, path), encoding="utf-8") as handle:
            return handle.read()

    enums = read("crates/core/src/domain/enums.rs")
    tool_block = re.search(r"Tool \{(.*?)\}", enums, re.S)
    tools = set(re.findall(r'=> "([a-z_]+)"', tool_block.group(1))) if tool_block else set()
    worker = read("worker/src/lib.rs")
    if '"knowledge"' in worker:
        tools.add("knowledge")  # the internal queue a worker consumes with --tools knowledge
    # Work a worker takes from PostgreSQL rather than a queue: `--tools batch`
    # claims batch lines (crates/jobs/src/batches.rs), so no KEDA queue trigger.
    claimed = set()
    batches = os.path.join(root, "crates/jobs/src/batches.rs")
    if os.path.exists(batches):
        claimed.update(re.findall(r'pub const BATCH_QUEUE: &str = "([a-z_]+)"', read("crates/jobs/src/batches.rs")))
    api_routes = set(re.findall(r'#\[get\("(/[a-z]+)"\)\]', read("api/src/routes/health.rs")))
    listener_routes = set(re.findall(r'"(/(?:healthz|metrics))"', read("crates/jobs/src/metrics.rs")))
    whisper_routes = set(re.findall(r'["\'](/health)["\']', read("sidecars/whisper/server.py")))
    cli = read("api/src/cli.rs")
    subcommands = {m.lower() for m in re.findall(r"^\s{4}([A-Z][a-z]+)\s*[,{]", cli.split("enum Command", 1)[1].split("}\n", 1)[0], re.M)}
    return {
        "tools": tools,
        "claimed": claimed,
        "routes": {"unigen-api": api_routes, "unigen-worker": listener_routes,
                   "unigen-scheduler": listener_routes, "unigen-whisper": whisper_routes},
        "subcommands": subcommands,
    }


def real_kustomize() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        try:
            subprocess.run(["kubectl", "kustomize", "--help"], capture_output=True, check=True, timeout=30)
            return ["kubectl", "kustomize"]
        except (subprocess.SubprocessError, OSError):
            return None
    return None


def image_binary(image: str) -> str:
    name = image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    return name


def check_builtin(doc: dict, where: str, version: str, strict: bool, findings: Findings) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(doc, version, strict)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        findings.add(where, f"Kubernetes {version} schema: {path}: {err.message}")
    except kubernetes_validate.SchemaNotFoundError:
        findings.add(where, f"no Kubernetes {version} schema for {doc.get('apiVersion')} {doc.get('kind')}")


def unknown(fields: dict, allowed: set, where: str, findings: Findings) -> None:
    if not isinstance(fields, dict):
        findings.add(where, "must be a mapping")
        return
    for key in sorted(set(fields) - allowed):
        findings.add(where, f"unknown field `{key}`")


def check_scaled_object(doc: dict, where: str, index: dict, facts: dict, findings: Findings) -> None:
    if doc.get("apiVersion") != "keda.sh/v1alpha1":
        findings.add(where, "ScaledObject must be keda.sh/v1alpha1")
    spec = doc.get("spec") or {}
    unknown(spec, SCALED_OBJECT_SPEC, f"{where} spec", findings)
    ref = spec.get("scaleTargetRef") or {}
    unknown(ref, SCALE_TARGET_REF, f"{where} spec.scaleTargetRef", findings)
    target = index.get((ref.get("kind", "Deployment"), ref.get("name")))
    if target is None:
        findings.add(where, f"scaleTargetRef names no Deployment in the render: {ref.get('name')!r}")
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    for field, value in (("minReplicaCount", low), ("maxReplicaCount", high),
                         ("pollingInterval", spec.get("pollingInterval", 30)),
                         ("cooldownPeriod", spec.get("cooldownPeriod", 300))):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            findings.add(where, f"spec.{field} must be a non-negative integer")
    if isinstance(low, int) and isinstance(high, int) and (high < 1 or low > high):
        findings.add(where, f"minReplicaCount {low} / maxReplicaCount {high} is not a valid range")
    if "fallback" in spec:
        unknown(spec["fallback"], FALLBACK, f"{where} spec.fallback", findings)
        if not isinstance((spec["fallback"] or {}).get("replicas"), int):
            findings.add(where, "spec.fallback.replicas must be an integer")
    if "advanced" in spec:
        unknown(spec["advanced"], ADVANCED, f"{where} spec.advanced", findings)
        hpa = (spec["advanced"] or {}).get("horizontalPodAutoscalerConfig")
        if hpa is not None:
            unknown(hpa, HPA_CONFIG, f"{where} spec.advanced.horizontalPodAutoscalerConfig", findings)
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        findings.add(where, "spec.triggers must be a non-empty list")
        return
    queues = []
    for number, trigger in enumerate(triggers):
        at = f"{where} spec.triggers[{number}]"
        unknown(trigger, TRIGGER, at, findings)
        if trigger.get("type") != "rabbitmq":
            findings.add(at, f"type {trigger.get('type')!r}: unigen's workers scale on their RabbitMQ queues")
            continue
        meta = trigger.get("metadata") or {}
        unknown(meta, RABBITMQ_METADATA, f"{at}.metadata", findings)
        for key, value in meta.items():
            if not isinstance(value, str):
                findings.add(at, f"metadata.{key} must be a string (KEDA's metadata is a map of strings)")
        if meta.get("mode") != "QueueLength" or meta.get("protocol") != "amqp":
            findings.add(at, "mode must be QueueLength over protocol amqp (ready messages, see the README)")
        if not re.fullmatch(r"[1-9][0-9]*", str(meta.get("value", ""))):
            findings.add(at, "metadata.value must be a positive integer string")
        queue = str(meta.get("queueName", ""))
        match = re.fullmatch(r"jobs\.([a-z_]+)", queue)
        if not match or match.group(1) not in facts["tools"]:
            findings.add(at, f"queueName {queue!r} is not jobs.<tool> of a tool the code has ({', '.join(sorted(facts['tools']))})")
        else:
            queues.append(match.group(1))
        auth = (trigger.get("authenticationRef") or {}).get("name")
        if ("TriggerAuthentication", auth) not in index:
            findings.add(at, f"authenticationRef names no TriggerAuthentication in the render: {auth!r}")
    if target is not None:
        spec_ = kustomize_render.pod_spec(target) or {}
        workers = [c for c in spec_.get("containers") or [] if image_binary(c.get("image", "")) == "unigen-worker"]
        args = workers[0].get("args", []) if workers else []
        tools = args[args.index("--tools") + 1].split(",") if "--tools" in args else []
        # Work claimed from PostgreSQL (batch lines) has no queue to scale on.
        tools = [tool for tool in tools if tool not in facts["claimed"]]
        if sorted(tools) != sorted(queues):
            findings.add(where, f"its triggers scale on {sorted(queues)} but {ref.get('name')} consumes --tools {sorted(tools)}")
    doc.setdefault("_queues", queues)


def check_trigger_auth(doc: dict, where: str, index: dict, secret_keys: set, findings: Findings) -> None:
    spec = doc.get("spec") or {}
    unknown(spec, TRIGGER_AUTH_SPEC, f"{where} spec", findings)
    refs = spec.get("secretTargetRef")
    if not isinstance(refs, list) or not refs:
        findings.add(where, "spec.secretTargetRef must be a non-empty list")
        return
    for number, ref in enumerate(refs):
        unknown(ref, SECRET_TARGET_REF, f"{where} spec.secretTargetRef[{number}]", findings)
        secret = index.get(("Secret", ref.get("name")))
        keys = set((secret or {}).get("stringData") or {}) | set((secret or {}).get("data") or {}) if secret else secret_keys
        if secret is None and ("Secret", ref.get("name")) not in EXTERNAL:
            findings.add(where, f"secretTargetRef names an unknown Secret {ref.get('name')!r}")
        elif ref.get("key") not in keys:
            findings.add(where, f"secretTargetRef key {ref.get('key')!r} is not in Secret {ref.get('name')}")


def check_pod_monitor(doc: dict, where: str, pods: list, findings: Findings) -> None:
    if doc.get("apiVersion") != "monitoring.coreos.com/v1":
        findings.add(where, "PodMonitor must be monitoring.coreos.com/v1")
    spec = doc.get("spec") or {}
    unknown(spec, POD_MONITOR_SPEC, f"{where} spec", findings)
    endpoints = spec.get("podMetricsEndpoints") or []
    if not endpoints:
        findings.add(where, "spec.podMetricsEndpoints must not be empty")
    for number, endpoint in enumerate(endpoints):
        unknown(endpoint, POD_METRICS_ENDPOINT, f"{where} spec.podMetricsEndpoints[{number}]", findings)
    if not isinstance((spec.get("selector") or {}).get("matchLabels"), dict):
        findings.add(where, "spec.selector.matchLabels must be a mapping")


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_workload(doc: dict, where: str, index: dict, facts: dict, config: dict, findings: Findings) -> None:
    spec = kustomize_render.pod_spec(doc) or {}
    template_labels = ((doc.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})
    if doc.get("kind") == "Deployment":
        match = ((doc.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not selects(match, template_labels):
            findings.add(where, "spec.selector does not select the pod template's labels")
    pod_security = spec.get("securityContext") or {}
    if pod_security.get("runAsNonRoot") is not True:
        findings.add(where, "pod securityContext.runAsNonRoot must be true")
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    for volume in volumes.values():
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and ("PersistentVolumeClaim", claim) not in index:
            findings.add(where, f"volume {volume['name']} claims an unknown PVC {claim!r}")
        config_map = (volume.get("configMap") or {}).get("name")
        if config_map and ("ConfigMap", config_map) not in index:
            findings.add(where, f"volume {volume['name']} mounts an unknown ConfigMap {config_map!r}")
    long_running = doc.get("kind") != "Job"
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        at = f"{where} container {container.get('name')}"
        binary = image_binary(container.get("image", ""))
        sidecar = container.get("restartPolicy") == "Always"
        if container in (spec.get("initContainers") or []) and not sidecar:
            continue
        security = container.get("securityContext") or {}
        if security.get("allowPrivilegeEscalation") is not False:
            findings.add(at, "securityContext.allowPrivilegeEscalation must be false")
        if security.get("readOnlyRootFilesystem") is not True:
            findings.add(at, "securityContext.readOnlyRootFilesystem must be true")
        if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
            findings.add(at, "securityContext.capabilities.drop must contain ALL")
        resources = container.get("resources") or {}
        if not (resources.get("requests") or {}).get("cpu") or not (resources.get("requests") or {}).get("memory"):
            findings.add(at, "resources.requests needs cpu and memory")
        if not (resources.get("limits") or {}).get("memory"):
            findings.add(at, "resources.limits.memory is missing")
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                findings.add(at, f"volumeMount {mount.get('name')} has no volume")
        for source in container.get("envFrom") or []:
            for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                name = (source.get(key) or {}).get("name")
                if name and (kind, name) not in index and (kind, name) not in EXTERNAL:
                    findings.add(at, f"envFrom names an unknown {kind} {name!r}")
        ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        if long_running:
            probes = [p for p in ("livenessProbe", "readinessProbe", "startupProbe") if container.get(p)]
            if "livenessProbe" not in probes or ("readinessProbe" not in probes and "startupProbe" not in probes):
                findings.add(at, "needs a liveness probe and a readiness (or startup) probe")
            for probe_name in probes:
                get = container[probe_name].get("httpGet") or {}
                if get.get("port") not in ports:
                    findings.add(at, f"{probe_name} port {get.get('port')!r} is not a named port of the container")
                routes = facts["routes"].get(binary)
                if routes is not None and get.get("path") not in routes:
                    findings.add(at, f"{probe_name} path {get.get('path')!r} is not a route {binary} serves ({', '.join(sorted(routes))})")
        if binary in {"unigen-worker", "unigen-scheduler"}:
            key = "UNIGEN__WORKER__METRICS_ADDR" if binary == "unigen-worker" else "UNIGEN__SCHEDULER__METRICS_ADDR"
            address = config.get(key, "")
            if not address.endswith(f":{ports.get('metrics')}") or not address.startswith("0.0.0.0:"):
                findings.add(at, f"{key}={address!r} does not serve the container's metrics port {ports.get('metrics')}")
        if binary == "unigen-api" and long_running:
            if config.get("UNIGEN__HTTP__HOST") != "0.0.0.0" or config.get("UNIGEN__HTTP__PORT") != str(ports.get("http")):
                findings.add(at, "UNIGEN__HTTP__HOST/PORT do not serve the container's http port on 0.0.0.0")
        if doc.get("kind") == "Job" and binary == "unigen-api":
            args = container.get("args") or []
            if not args or args[0] not in facts["subcommands"]:
                findings.add(at, f"args {args} name no unigen-api subcommand ({', '.join(sorted(facts['subcommands']))})")
    if doc.get("kind") == "Deployment":
        grace = spec.get("terminationGracePeriodSeconds", 30)
        for container in spec.get("containers") or []:
            for env in container.get("env") or []:
                if env.get("name") == "UNIGEN__WORKER__GRACE_SECONDS" and grace < int(env.get("value", "30")) + 15:
                    findings.add(where, "terminationGracePeriodSeconds must exceed the worker grace by 15 s or more")


def check_render(name: str, docs: list, facts: dict, version: str, secret_keys: set, findings: Findings) -> None:
    index = {(d.get("kind"), (d.get("metadata") or {}).get("name")): d for d in docs}
    config = {}
    for doc in docs:
        if doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == "unigen-env":
            config = doc.get("data") or {}
    pods = [d for d in docs if kustomize_render.pod_spec(d) is not None]
    queues: dict[str, list] = {}
    for doc in docs:
        kind = doc.get("kind")
        where = f"{name}: {kind}/{(doc.get('metadata') or {}).get('name')}"
        labels = (doc.get("metadata") or {}).get("labels") or {}
        if labels.get("app.kubernetes.io/name") != "unigen":
            findings.add(where, "label app.kubernetes.io/name=unigen is missing")
        if kind == "ScaledObject":
            check_scaled_object(doc, where, index, facts, findings)
            for tool in doc.pop("_queues", []):
                queues.setdefault(tool, []).append(doc["metadata"]["name"])
        elif kind == "TriggerAuthentication":
            check_trigger_auth(doc, where, index, secret_keys, findings)
        elif kind == "PodMonitor":
            check_pod_monitor(doc, where, pods, findings)
        else:
            check_builtin(doc, where, version, True, findings)
        if kustomize_render.pod_spec(doc) is not None:
            check_workload(doc, where, index, facts, config, findings)
        if kind in {"Service", "PodDisruptionBudget"}:
            selector = (doc.get("spec") or {}).get("selector") or {}
            selector = selector.get("matchLabels", selector) if kind == "PodDisruptionBudget" else selector
            if not any(selects(selector, ((p.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})) for p in pods if p.get("kind") != "Job"):
                findings.add(where, "its selector matches no pod template")
        if kind == "HorizontalPodAutoscaler":
            ref = (doc.get("spec") or {}).get("scaleTargetRef") or {}
            if (ref.get("kind"), ref.get("name")) not in index:
                findings.add(where, f"scaleTargetRef names nothing in the render: {ref}")
            spec = doc.get("spec") or {}
            if spec.get("minReplicas", 1) > spec.get("maxReplicas", 0):
                findings.add(where, "minReplicas exceeds maxReplicas")
    consumers: dict[str, list] = {}
    for doc in docs:
        if doc.get("kind") != "Deployment":
            continue
        for container in (kustomize_render.pod_spec(doc) or {}).get("containers") or []:
            if image_binary(container.get("image", "")) != "unigen-worker":
                continue
            args = container.get("args") or []
            if "--tools" not in args or args.index("--tools") + 1 >= len(args):
                findings.add(f"{name}: Deployment/{doc['metadata']['name']}", "a worker without --tools")
                continue
            for tool in args[args.index("--tools") + 1].split(","):
                consumers.setdefault(tool, []).append(doc["metadata"]["name"])
    if consumers:
        known = facts["tools"] | facts["claimed"]
        for tool in sorted(set(consumers) - known):
            findings.add(name, f"--tools {tool} of {', '.join(consumers[tool])} is not a tool, queue or batch the worker has ({', '.join(sorted(known))})")
        for tool in sorted(known):
            if len(consumers.get(tool, [])) != 1:
                findings.add(name, f"{tool} is consumed by {len(consumers.get(tool, []))} worker Deployments ({', '.join(consumers.get(tool, [])) or 'none'}): every tool needs exactly one group")
    if any(d.get("kind") == "ScaledObject" for d in docs):
        for tool in sorted(facts["tools"]):
            owners = queues.get(tool, [])
            if len(owners) != 1:
                findings.add(name, f"queue jobs.{tool} is scaled by {len(owners)} worker groups ({', '.join(owners) or 'none'}): every queue needs exactly one")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--kubernetes-version", default=KUBERNETES_VERSION)
    parser.add_argument("--deploy", help="the deploy/ folder to check (default: <root>/deploy)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    deploy = os.path.join(os.path.abspath(args.deploy or os.path.join(root, "deploy")), "kubernetes")
    facts = code_facts(root)
    findings = Findings()
    example = kustomize_render._load_yaml_documents(os.path.join(deploy, "base", "secret.example.yaml"))[0]
    secret_keys = set(example.get("stringData") or {})
    check_builtin(example, "base/secret.example.yaml", args.kubernetes_version, True, findings)
    real = real_kustomize()
    for name in RENDERS:
        folder = os.path.join(deploy, name)
        try:
            docs = kustomize_render.render(folder)
        except kustomize_render.RenderError as err:
            findings.add(name, f"render failed: {err}")
            continue
        if real:
            result = subprocess.run(real + [folder], capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                findings.add(name, f"{' '.join(real)} failed: {result.stderr.strip()}")
            else:
                theirs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.stdout) if d}
                ours = {(d["kind"], d["metadata"]["name"]): d for d in docs}
                for key in sorted(set(theirs) | set(ours)):
                    if theirs.get(key) != ours.get(key):
                        findings.add(name, f"{'/'.join(key)} differs between {' '.join(real)} and kustomize_render.py")
        before = len(findings.items)
        check_render(name, docs, facts, args.kubernetes_version, secret_keys, findings)
        kinds = sorted({d["kind"] for d in docs})
        status = "ok" if len(findings.items) == before else "FAILED"
        print(f"{name}: {len(docs)} documents ({', '.join(kinds)}): {status}")
    print("rendered with kustomize_render.py" + (f", compared with {' '.join(real)}" if real else " (no kustomize on the PATH to compare with)"))
    for item in findings.items:
        print(f"  {item}")
    return 1 if findings.items else 0


if __name__ == "__main__":
    sys.exit(main())
