#!/usr/bin/env python3
"""Hash pins of the project's pip requirements files (standard library only).

    python3 sidecars/whisper/pins.py hash  [FILE...]   rewrite the --hash lines from PyPI
    python3 sidecars/whisper/pins.py check [FILE...]   offline: every pin hashed, shared
                                                      pins the same in every file

FILE defaults to sidecars/whisper/requirements.txt and tests/sdk/requirements.txt.

`hash` keeps every `name==version` pin and every comment as it is and replaces
the requirement's hashes with the sha256 of every file PyPI publishes for that
exact version (all platforms' wheels and the sdist), read from the index's JSON
simple API (PEP 691) at $PIP_INDEX_URL or https://pypi.org/simple. To move a
pin, edit its version and run `hash`; to add a package, add a `name==version`
line and run `hash`.

`check` needs no network: every requirement is pinned with == and hashed, each
file stands alone (no -c, -r, -e or URL: constraints do not mix with pip's
hash-checking mode), no package is listed twice in a file, and a package listed
in several files (the Whisper sidecar and the client SDKs share one venv) has
the same version and the same hashes in each. It exits 1 and names what is
wrong otherwise. That every transitive dependency is pinned is pip's own check:
`pip install --require-hashes` refuses a dependency that is not.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_FILES = [
    os.path.join(REPO, "sidecars", "whisper", "requirements.txt"),
    os.path.join(REPO, "tests", "sdk", "requirements.txt"),
]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)$")
HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class Requirement:
    def __init__(self, name: str, version: str, hashes: list[str], lineno: int, comment: str):
        self.name, self.version, self.hashes, self.lineno = name, version, hashes, lineno
        self.comment = comment  # a trailing `# ...`, kept by `hash`


def parse(path: str) -> tuple[list[object], list[str]]:
    """The file as a list of comment/blank lines (str) and Requirements, plus errors."""
    with open(path, encoding="utf-8") as f:
        physical = f.read().splitlines()
    items: list[object] = []
    errors: list[str] = []
    i = 0
    while i < len(physical):
        start = i
        line = physical[i]
        if not line.strip() or line.lstrip().startswith("#"):
            items.append(line)
            i += 1
            continue
        logical = ""
        while True:
            part = physical[i]
            i += 1
            if part.rstrip().endswith("\\") and i < len(physical):
                logical += part.rstrip()[:-1] + " "
                continue
            logical += part
            break
        where = f"{os.path.relpath(path, REPO)}:{start + 1}"
        code_part, _, comment = logical.partition(" #")
        code = code_part.split()
        if not code:
            items.append(line)
            continue
        m = PIN.match(code[0])
        if not m:
            errors.append(f"{where}: `{code[0]}` is not a `name==version` pin "
                          "(each file stands alone: no -c, -r, -e, URL or range)")
            continue
        hashes = []
        for opt in code[1:]:
            h = HASH.match(opt)
            if not h:
                errors.append(f"{where}: {m.group(1)}: unexpected `{opt}` (only --hash=sha256:...)")
                continue
            hashes.append(h.group(1))
        items.append(Requirement(m.group(1), m.group(2), hashes, start + 1,
                                 f"  #{comment.rstrip()}" if comment else ""))
    return items, errors


def requirements(items: list[object]) -> list[Requirement]:
    return [item for item in items if isinstance(item, Requirement)]


def file_version(filename: str) -> str | None:
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            base = filename[: -len(ext)]
            return base.rsplit("-", 1)[1] if "-" in base else None
    return None  # .egg, .exe...: pip would not install them


def published_hashes(index: str, req: Requirement) -> list[str]:
    url = f"{index.rstrip('/')}/{canonical(req.name)}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        project = json.load(response)
    hashes = set()
    for f in project["files"]:
        version = file_version(f["filename"])
        if version is None or version.lower() != req.version.lower():
            continue
        if "sha256" not in f.get("hashes", {}):
            raise SystemExit(f"{f['filename']}: the index gives no sha256")
        if f.get("yanked"):
            print(f"warning: {f['filename']} is yanked", file=sys.stderr)
        hashes.add(f["hashes"]["sha256"])
    if not hashes:
        raise SystemExit(f"{req.name}=={req.version}: no files of that version at {url}")
    return sorted(hashes)


def render(items: list[object]) -> str:
    out = []
    for item in items:
        if isinstance(item, Requirement):
            # pip drops everything after a `#` of the joined line: the
            # comment goes last, after the hashes.
            out.append(f"{item.name}=={item.version}" + "".join(
                f" \\\n    --hash=sha256:{h}" for h in item.hashes) + item.comment)
        else:
            out.append(item)
    return "\n".join(out) + "\n"


def cmd_hash(files: list[str]) -> int:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
    for path in files:
        items, errors = parse(path)
        if errors:
            print("\n".join(errors), file=sys.stderr)
            return 1
        for req in requirements(items):
            req.hashes = published_hashes(index, req)
            print(f"{os.path.relpath(path, REPO)}: {req.name}=={req.version}: "
                  f"{len(req.hashes)} files", file=sys.stderr)
        with open(path, "w", encoding="utf-8") as f:
            f.write(render(items))
    return cmd_check(files)


def cmd_check(files: list[str]) -> int:
    errors: list[str] = []
    seen: dict[str, tuple[str, Requirement]] = {}
    for path in files:
        items, file_errors = parse(path)
        errors += file_errors
        rel = os.path.relpath(path, REPO)
        in_file: dict[str, Requirement] = {}
        for req in requirements(items):
            key = canonical(req.name)
            if key in in_file:
                errors.append(f"{rel}:{req.lineno}: {req.name} is listed twice")
            in_file[key] = req
            if not req.hashes:
                errors.append(f"{rel}:{req.lineno}: {req.name}=={req.version} has no --hash "
                              "(run sidecars/whisper/pins.py hash)")
            if key in seen:
                other_path, other = seen[key]
                if other.version != req.version:
                    errors.append(f"{rel}:{req.lineno}: {req.name}=={req.version} but "
                                  f"{other_path}:{other.lineno} pins {other.version}")
                elif sorted(other.hashes) != sorted(req.hashes):
                    errors.append(f"{rel}:{req.lineno}: {req.name}=={req.version} hashes differ "
                                  f"from {other_path}:{other.lineno}")
            else:
                seen[key] = (rel, req)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print(f"pins.py: {len(seen)} packages in {len(files)} files, all pinned and hashed, "
          "shared pins agree", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in ("hash", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    files = [os.path.abspath(f) for f in argv[1:]] or DEFAULT_FILES
    return cmd_hash(files) if argv[0] == "hash" else cmd_check(files)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
