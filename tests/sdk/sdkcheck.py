"""Shared by the Python client checks (python/openai_check.py,
langchain/langchain_check.py): step bookkeeping that keeps going after a
failure and names each failed step with the bodies involved, a client for
the fake upstream's recordings, and small validators. Stdlib only.

Environment (set by tests/tests/e2e/clients.rs):
    OPENAI_BASE_URL, OPENAI_API_KEY    the unigen API and a key
    FAKE_UPSTREAM_URL                  the fake upstream (fake_upstream.py)
    FAKE_CHAT_MODEL, FAKE_EMBED_MODEL  catalogue ids routed to it
    UPSTREAM_CHAT_MODEL, UPSTREAM_EMBED_MODEL, UPSTREAM_API_KEY
                                       what the upstream should see
    CLIENT_CHECKS                      optional comma-separated flow names to run
"""
import json
import os
import re
import struct
import base64
import sys
import traceback
import urllib.request

ENV = {name: os.environ.get(name, "") for name in (
    "OPENAI_BASE_URL", "OPENAI_API_KEY", "FAKE_UPSTREAM_URL", "FAKE_CHAT_MODEL", "FAKE_EMBED_MODEL",
    "UPSTREAM_CHAT_MODEL", "UPSTREAM_EMBED_MODEL", "UPSTREAM_API_KEY")}

# Sampling fields the service interprets: forwarded only when the client sent them.
INTERPRETED = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "frequency_penalty",
               "presence_penalty", "stop", "user")


def show(value, limit=4000):
    """A value for a failure message: JSON when possible, cut to `limit`."""
    try:
        if hasattr(value, "model_dump"):
            value = value.model_dump(exclude_unset=True)
        text = json.dumps(value, default=str, indent=None)
    except Exception:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class Checks:
    def __init__(self, client_name):
        self.client = client_name
        self.passed = 0
        self.failures = []
        self.flow_name = "?"
        only = os.environ.get("CLIENT_CHECKS", "")
        self.only = {f.strip() for f in only.split(",") if f.strip()}

    def check(self, step, condition, **details):
        """Records one assertion; details are printed (as JSON) when it fails."""
        name = f"{self.flow_name}: {step}"
        if condition:
            self.passed += 1
            print(f"ok: {name}", flush=True)
            return True
        lines = [f"FAILED: {name}"] + [f"    {key}: {show(value)}" for key, value in details.items()]
        self.failures.append(name)
        print("\n".join(lines), flush=True)
        return False

    def equal(self, step, got, expected, **details):
        return self.check(step, got == expected, got=got, expected=expected, **details)

    def run(self, name, flow, *args):
        """Runs one flow; an exception fails the flow with the server's answer."""
        if self.only and name not in self.only:
            return
        self.flow_name = name
        print(f"--- {self.client} / {name}", flush=True)
        try:
            flow(self, *args)
        except Exception as error:  # noqa: BLE001 - every failure is reported, then the next flow runs
            self.failures.append(f"{name}: raised {type(error).__name__}")
            response = getattr(error, "response", None)
            body = None
            if response is not None:
                try:
                    body = f"HTTP {response.status_code} {response.text}"
                except Exception:
                    body = repr(response)
            print(f"FAILED: {name}: raised {type(error).__name__}: {error}", flush=True)
            if body:
                print(f"    server answered: {body[:4000]}", flush=True)
            print("    " + traceback.format_exc(limit=-3).replace("\n", "\n    "), flush=True)

    def attempt(self, step, call):
        """call(); on an exception the step fails with the server's answer and None is returned."""
        try:
            return call()
        except Exception as error:  # noqa: BLE001
            response = getattr(error, "response", None)
            answer = None
            if response is not None:
                try:
                    answer = f"HTTP {response.status_code} {response.text}"
                except Exception:
                    answer = repr(response)
            self.check(step, False, raised=f"{type(error).__name__}: {error}", server_answered=answer)
            return None

    def finish(self):
        print(f"{self.client}: {self.passed} checks ok, {len(self.failures)} failed", flush=True)
        for failure in self.failures:
            print(f"  failed: {failure}", flush=True)
        sys.exit(1 if self.failures else 0)


class Upstream:
    """The fake upstream's recordings."""

    def __init__(self, url=None):
        self.url = (url or ENV["FAKE_UPSTREAM_URL"]).rstrip("/")

    def _call(self, method, path):
        request = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        # The fake upstream is on loopback: never through a proxy.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as response:
            return json.loads(response.read())

    def reset(self):
        self._call("POST", "/__reset")

    def requests(self, path=None):
        recorded = self._call("GET", "/__recorded")["requests"]
        return [r for r in recorded if path is None or r["path"] == path]

    def chats(self):
        return self.requests("/v1/chat/completions")

    def embeddings(self):
        return self.requests("/v1/embeddings")


def decode_embedding(value):
    """An embedding as floats, whether sent as floats or as base64 float32."""
    if isinstance(value, str):
        raw = base64.b64decode(value)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return list(value)


def streamed_text(chunks, index=0):
    return "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks
                   if c.get("choices") and c["choices"][0]["index"] == index)


def upstream_delta_tool_calls(chunks):
    return [tc for c in chunks for ch in c.get("choices", []) for tc in (ch["delta"].get("tool_calls") or [])]


def schema_errors(value, schema, defs=None, where="$"):
    """Why `value` is not valid for a JSON schema (the subset tools use); [] when valid."""
    defs = defs if defs is not None else schema.get("$defs", schema.get("definitions", {}))
    if "$ref" in schema:
        return schema_errors(value, defs[schema["$ref"].split("/")[-1]], defs, where)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            if any(not schema_errors(value, s, defs, where) for s in schema[key]):
                return []
            return [f"{where}: matches none of {key}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    checks = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
              "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "null": lambda v: v is None}
    if kinds and not any(checks[k](value) for k in kinds):
        return errors + [f"{where}: {value!r} is not {kinds}"]
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where}: missing required {name!r}")
        properties = schema.get("properties", {})
        for name, sub in properties.items():
            if name in value:
                errors += schema_errors(value[name], sub, defs, f"{where}.{name}")
        if schema.get("additionalProperties") is False:
            errors += [f"{where}: unexpected {k!r}" for k in value if k not in properties]
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], defs, f"{where}[{i}]")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value} > maximum {schema['maximum']}")
    return errors


def png_size(data):
    """(width, height) of PNG bytes, or None when they are not a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def make_png(width, height, rgba):
    """An RGBA PNG of one colour per pixel from rgba(x, y) -> (r, g, b, a)."""
    import zlib
    rows = b"".join(b"\x00" + b"".join(bytes(rgba(x, y)) for x in range(width)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def plain_message(message):
    """An error message a person can read: no serde locations or Rust type names."""
    return bool(message) and not re.search(r"at line \d+ column \d+|invalid type: |expected .* at line", message)


def headers_errors(headers, client_request_id=None):
    """What is missing from G's response headers (a case-insensitive mapping)."""
    errors = []
    for name in ("x-request-id", "openai-processing-ms", "x-ratelimit-limit-requests",
                 "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"):
        if not headers.get(name):
            errors.append(f"missing {name}")
    if client_request_id and headers.get("x-request-id") != client_request_id:
        errors.append(f"x-request-id {headers.get('x-request-id')!r} does not echo {client_request_id!r}")
    return errors
