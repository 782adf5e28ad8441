"""The job event stream: submit an async job, then read
`GET /jobs/{id}/events` (server-sent events) until the job's terminal event.
Each event's `data` is the job as `GET /jobs/{id}` shows it.

    export OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_...
    python job_events.py
"""
import json
import os

import httpx

base = os.environ["OPENAI_BASE_URL"].rstrip("/")
headers = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}

with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
    job = http.post("/videos/generations?async=true",
                    json={"prompt": "waves at sunset", "duration_seconds": 2}).raise_for_status().json()
    print("submitted:", job["id"])

    seen = []
    event = {}
    # A stream ends by itself after the terminal event. After a dropped
    # connection, send the last `id:` back as Last-Event-ID to resume.
    with http.stream("GET", f"/jobs/{job['id']}/events") as stream:
        stream.raise_for_status()
        for line in stream.iter_lines():
            if line.startswith(("event:", "id:", "data:")):
                field, _, value = line.partition(":")
                event[field] = value.strip()
            elif line == "" and "data" in event:  # a blank line ends an event
                state = json.loads(event["data"])
                print(f"{event.get('event')} id={event.get('id')} status={state['status']} progress={state['progress']}")
                seen.append(state["status"])
                event = {}

if not seen or seen[-1] != "completed":
    raise SystemExit(f"the stream ended without a completed job: {seen}")
print("video:", state["outputData"]["video"]["url"])
