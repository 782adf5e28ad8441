"""Sync image generation with the OpenAI Python SDK: the answer comes when
the image is ready.

    export OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_...
    python generate_sync.py
"""
import httpx
from openai import OpenAI

client = OpenAI()  # reads OPENAI_BASE_URL and OPENAI_API_KEY

# `dall-e-3` is an alias of the built-in procedural renderer (not a
# text-to-image model); with an upstream configured it is a real one.
result = client.images.generate(model="dall-e-3", prompt="a lighthouse at dusk", size="1024x1024")
image = result.data[0]
print("url:", image.url)

# The URL is signed and expires (storage.url_ttl_seconds); no key needed.
png = httpx.get(image.url).raise_for_status().content
if not png.startswith(b"\x89PNG\r\n\x1a\n"):
    raise SystemExit(f"expected a PNG, got {png[:16]!r}")
print(f"downloaded a PNG of {len(png)} bytes")
