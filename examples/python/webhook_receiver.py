"""A webhook receiver that verifies signatures.

It listens on a local port, registers a webhook pointing at itself,
generates an image asynchronously and waits for the signed
`generation.completed` event of that job. Every request is checked as
docs/webhooks.md says: the timestamp within 300 s of the clock, the
HMAC-SHA256 of `<timestamp>:<raw body>` keyed with the secret, compared in
constant time, and duplicates (the same event id) skipped. It then deletes
the webhook.

unigen only delivers to https URLs on public addresses; for this local
receiver the stack needs UNIGEN__WEBHOOKS__ALLOW_PRIVATE_ADDRESSES=true.

    export OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_...
    python webhook_receiver.py
"""
import hashlib
import hmac
import http.server
import json
import os
import queue
import threading
import time

import httpx

TOLERANCE_SECONDS = 300


def verify(secret: str, headers, body: bytes) -> dict:
    """The event, or ValueError when the request must be rejected (400)."""
    try:
        timestamp = int(headers["x-service-timestamp"])
        signature = headers["x-service-signature"]
    except (KeyError, TypeError, ValueError):
        raise ValueError("missing or malformed signature headers")
    if abs(time.time() - timestamp) > TOLERANCE_SECONDS:
        raise ValueError("timestamp outside the 300 s tolerance")
    expected = hmac.new(secret.encode(), f"{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise ValueError("signature mismatch")
    return json.loads(body)


events: "queue.Queue[dict]" = queue.Queue()
secret = ""  # set once the webhook is registered
seen = set()  # event ids already processed: durable storage in production


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            event = verify(secret, self.headers, body)
        except ValueError as err:
            print("rejected:", err)
            self.send_response(400)
            self.end_headers()
            return
        # Answer 2xx quickly; do slow work after answering.
        self.send_response(204)
        self.end_headers()
        if event["id"] not in seen:
            seen.add(event["id"])
            events.put(event)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
receiver_url = f"http://127.0.0.1:{server.server_address[1]}/hooks/unigen"

base = os.environ["OPENAI_BASE_URL"].rstrip("/")
api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}, timeout=60)

webhook = api.post("/webhooks", json={
    "name": "example receiver",
    "url": receiver_url,
    "events": ["generation.completed", "generation.failed"],
}).raise_for_status().json()
secret = webhook["secret"]  # shown once, at creation
print("webhook:", webhook["id"], "->", receiver_url)
try:
    job = api.post("/images/generations?async=true",
                   json={"prompt": "a paper boat", "size": "512x512"}).raise_for_status().json()
    print("job:", job["id"])
    deadline = time.monotonic() + 120
    while True:
        event = events.get(timeout=max(0.0, deadline - time.monotonic()))
        print("verified:", event["type"], event["data"].get("jobId"))
        if event["data"].get("jobId") == job["id"]:
            break
    if event["type"] != "generation.completed":
        raise SystemExit(f"the job failed: {event['data'].get('errorMessage')}")
    print("output:", event["data"]["outputUrl"])
finally:
    api.delete(f"/webhooks/{webhook['id']}").raise_for_status()
    server.shutdown()
