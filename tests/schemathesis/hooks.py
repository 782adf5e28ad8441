"""Schemathesis hooks for the unigen fuzzing run (loaded via SCHEMATHESIS_HOOKS).

1. Nothing leaves the machine: every http(s) URL a request carries (webhook
   targets, media URLs, attachments) is rewritten to loopback's discard
   port. The stack under test allows private addresses for fetches and
   webhooks, so such a URL is valid; fetching it fails fast.
2. A schema can only say "base64 of an image": in positive cases, media
   fields get real media (a 64x64 PNG, 1 s of WAV, 1 s of MP4), so that a
   valid request is one the server can serve. Negative cases are left as
   generated.
"""

import base64
import io
import os
import struct
import subprocess
import tempfile
import wave
import zlib

import schemathesis
from schemathesis.transport.serialization import Binary

DISCARD_URL = "http://127.0.0.1:9/discard"


def _png(width=64, height=64):
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 4 % 256, y * 4 % 256, 128)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _wav(seconds=1.0, rate=16000):
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        frames = int(seconds * rate)
        # A quiet 440 Hz square wave: audible, cheap to make.
        out.writeframes(b"".join(struct.pack("<h", 3000 if (i // 18) % 2 else -3000) for i in range(frames)))
    return buffer.getvalue()


def _mp4():
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "clip.mp4")
        subprocess.run(
            ["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=64x64:rate=10",
             "-t", "1", "-pix_fmt", "yuv420p", "-c:v", "libx264", path],
            check=True,
        )
        with open(path, "rb") as clip:
            return clip.read()


PNG = _png()
WAV = _wav()
MP4 = _mp4()
B64 = {"image": base64.b64encode(PNG).decode(), "audio": base64.b64encode(WAV).decode(),
       "video": base64.b64encode(MP4).decode()}

# JSON fields holding media, by kind (multipart forms carry the bytes).
JSON_MEDIA = {
    "image": "image", "mask": "image", "source_image": "image",
    "file": "audio", "source_audio": "audio", "reference_audio": "audio",
    "source_video": "video",
}
# Wrapped as schemathesis wraps generated binary values, so that its
# revalidation of the edited case reads them as the strings they stand for.
FORM_MEDIA = {"image": Binary(PNG), "mask": Binary(PNG), "file": Binary(WAV)}


def _without_urls(value):
    if isinstance(value, str):
        return DISCARD_URL if value.lower().startswith(("http://", "https://")) else value
    if isinstance(value, list):
        return [_without_urls(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_urls(item) for key, item in value.items()}
    return value


def _is_positive(case):
    meta = getattr(case, "_meta", None)
    return meta is not None and str(meta.generation.mode) == "positive"


@schemathesis.hook
def before_call(context, case, kwargs):
    body = _without_urls(case.body) if isinstance(case.body, (dict, list)) else case.body
    query = _without_urls(case.query) if case.query else case.query
    if _is_positive(case) and isinstance(body, dict):
        multipart = (case.media_type or "").startswith("multipart/")
        body = dict(body)
        for field in list(body):
            if multipart and field in FORM_MEDIA:
                body[field] = FORM_MEDIA[field]
            elif not multipart and field in JSON_MEDIA and isinstance(body[field], str):
                body[field] = B64[JSON_MEDIA[field]]
    if body is not case.body and body != case.body:
        case.body = body
    if query != case.query:
        case.query = query
