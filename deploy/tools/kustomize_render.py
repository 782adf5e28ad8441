"""A renderer for the subset of Kustomize that deploy/kubernetes uses.

CI machines reach no registry that ships kustomize or kubectl, so
scripts/check-deploy renders the overlays with this; where a real kustomize
is on the PATH (`kustomize` or `kubectl kustomize`), the script renders with
it too and requires the same documents.

Supported, with Kustomize's meaning:
  - `resources`: YAML files (several documents each) and directories holding
    a kustomization, relative to the kustomization's folder;
  - `namespace`: set on every resource (all of ours are namespaced);
  - `images`: `name` with `newName`, `newTag` and/or `digest`, applied to the
    containers and init containers of pod templates;
  - `replicas`: `name` and `count`, for Deployments and StatefulSets;
  - `patches` with `path` (or inline `patch`) holding strategic-merge
    patches, each addressed by its own apiVersion, kind and metadata.name.
    Lists of the built-in kinds merge on their Kubernetes merge keys
    (containers by name, env by name, volumeMounts by mountPath, ...); lists
    of custom resources (KEDA's) are replaced whole, as Kustomize does for
    kinds it has no schema for; `null` removes a key.

Anything else in a kustomization (generators, JSON 6902 patches with
`target`, components, labels, name prefixes, `$patch` directives...) is an
error naming the field, never silently ignored.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "namespace", "images", "replicas", "patches"}

# Strategic-merge keys of the lists in the built-in kinds we patch, by field
# name (ports depend on the owner: a Service's merge on `port`).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
BUILTIN_GROUPS = {
    "v1", "apps/v1", "batch/v1", "autoscaling/v2", "autoscaling/v1", "policy/v1",
    "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod"}


class RenderError(Exception):
    pass


def _load_yaml_documents(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        try:
            docs = [doc for doc in yaml.safe_load_all(handle) if doc is not None]
        except yaml.YAMLError as err:
            raise RenderError(f"{path}: not valid YAML: {err}") from err
    for doc in docs:
        if not isinstance(doc, dict):
            raise RenderError(f"{path}: a document is not a mapping")
    return docs


def _kustomization_file(folder: str) -> str:
    for name in KUSTOMIZATION_FILES:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    raise RenderError(f"{folder}: no kustomization.yaml")


def _key(doc: dict) -> tuple[str, str]:
    meta = doc.get("metadata") or {}
    return doc.get("kind", ""), meta.get("name", "")


def render(folder: str) -> list[dict]:
    """The documents `kustomize build folder` would print (in load order)."""
    path = _kustomization_file(folder)
    docs = _load_yaml_documents(path)
    if len(docs) != 1:
        raise RenderError(f"{path}: expected one document")
    kustomization = docs[0]
    unsupported = sorted(set(kustomization) - SUPPORTED_FIELDS)
    if unsupported:
        raise RenderError(f"{path}: unsupported by this renderer: {', '.join(unsupported)}")
    if kustomization.get("kind", "Kustomization") != "Kustomization":
        raise RenderError(f"{path}: kind must be Kustomization")

    resources: list[dict] = []
    for entry in kustomization.get("resources") or []:
        target = os.path.normpath(os.path.join(folder, entry))
        if os.path.isdir(target):
            resources.extend(render(target))
        elif os.path.isfile(target):
            if os.path.relpath(target, folder).startswith(".."):
                # Kustomize's load restrictor: files only from inside the root.
                raise RenderError(f"{path}: resource file {entry} is outside the kustomization's folder")
            resources.extend(_load_yaml_documents(target))
        else:
            raise RenderError(f"{path}: resource {entry} does not exist")
    seen: set[tuple[str, str]] = set()
    for doc in resources:
        if _key(doc) in seen:
            raise RenderError(f"{path}: {'/'.join(_key(doc))} is defined twice")
        seen.add(_key(doc))

    for patch_entry in kustomization.get("patches") or []:
        if not isinstance(patch_entry, dict) or set(patch_entry) - {"path", "patch"}:
            raise RenderError(f"{path}: only patches with `path` or `patch` (strategic merge) are supported")
        if "path" in patch_entry:
            patch_docs = _load_yaml_documents(os.path.join(folder, patch_entry["path"]))
        else:
            patch_docs = [d for d in yaml.safe_load_all(patch_entry["patch"]) if d is not None]
        for patch in patch_docs:
            _apply_patch(resources, patch, path)

    for replica in kustomization.get("replicas") or []:
        matched = False
        for doc in resources:
            if doc.get("kind") in {"Deployment", "StatefulSet", "ReplicaSet"} and _key(doc)[1] == replica["name"]:
                doc.setdefault("spec", {})["replicas"] = int(replica["count"])
                matched = True
        if not matched:
            raise RenderError(f"{path}: replicas: no workload named {replica['name']}")

    for image in kustomization.get("images") or []:
        unknown = set(image) - {"name", "newName", "newTag", "digest"}
        if unknown:
            raise RenderError(f"{path}: images: unsupported {', '.join(sorted(unknown))}")
        _set_image(resources, image)

    namespace = kustomization.get("namespace")
    if namespace:
        for doc in resources:
            doc.setdefault("metadata", {})["namespace"] = namespace
    return resources


def _apply_patch(resources: list[dict], patch: dict, where: str) -> None:
    if not isinstance(patch, dict) or "kind" not in patch or not (patch.get("metadata") or {}).get("name"):
        raise RenderError(f"{where}: a strategic-merge patch needs kind and metadata.name")
    matches = [doc for doc in resources if _key(doc) == _key(patch)]
    if len(matches) != 1:
        raise RenderError(f"{where}: patch for {'/'.join(_key(patch))} matches {len(matches)} resources")
    target = matches[0]
    builtin = target.get("apiVersion") in BUILTIN_GROUPS
    merged = _merge(target, patch, builtin, target.get("kind", ""), [])
    target.clear()
    target.update(merged)


def _merge(base: Any, patch: Any, builtin: bool, kind: str, trail: list[str]) -> Any:
    if isinstance(patch, dict):
        if any(k.startswith("$") for k in patch):
            raise RenderError(f"{'.'.join(trail)}: `$` directives are not supported")
        if not isinstance(base, dict):
            return _strip_nulls(copy.deepcopy(patch))
        out = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = _merge(out[key], value, builtin, kind, trail + [key])
            else:
                out[key] = _strip_nulls(copy.deepcopy(value))
        return out
    if isinstance(patch, list):
        field = trail[-1] if trail else ""
        merge_key = None
        if builtin:
            if field == "ports":
                merge_key = "port" if kind == "Service" else "containerPort"
            else:
                merge_key = MERGE_KEYS.get(field)
        if merge_key is None or not isinstance(base, list):
            return _strip_nulls(copy.deepcopy(patch))
        out = copy.deepcopy(base)
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                raise RenderError(f"{'.'.join(trail)}: every item needs its merge key `{merge_key}`")
            for index, existing in enumerate(out):
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]:
                    out[index] = _merge(existing, item, builtin, kind, trail + [str(item[merge_key])])
                    break
            else:
                # New items go first, as Kustomize's strategic merge puts them.
                out.insert(0, _strip_nulls(copy.deepcopy(item)))
        return out
    return patch


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def pod_spec(doc: dict) -> dict | None:
    """The pod spec of a workload (None for other kinds)."""
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in WORKLOAD_KINDS:
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    return None


def _split_image(image: str) -> tuple[str, str, str]:
    digest = ""
    if "@" in image:
        image, digest = image.split("@", 1)
    tag = ""
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        image, tag = image.rsplit(":", 1)
    return image, tag, digest


def _set_image(resources: list[dict], image: dict) -> None:
    for doc in resources:
        spec = pod_spec(doc)
        if not spec:
            continue
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            name, tag, digest = _split_image(container.get("image", ""))
            if name != image["name"]:
                continue
            name = image.get("newName", name)
            if "digest" in image:
                container["image"] = f"{name}@{image['digest']}"
            else:
                tag = image.get("newTag", tag)
                suffix = f":{tag}" if tag else ""
                suffix += f"@{digest}" if digest and "newTag" not in image else ""
                container["image"] = f"{name}{suffix}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: kustomize_render.py <kustomization folder>", file=sys.stderr)
        return 2
    try:
        docs = render(argv[1])
    except RenderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
