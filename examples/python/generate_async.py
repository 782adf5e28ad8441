"""Async generation: the request answers 202 at once with the job, and a
long poll (`GET /jobs/{id}?poll=true`) answers as soon as it finishes.

The OpenAI SDK has no method for unigen's job routes; its generic
`client.post` / `client.get` call them with the same base URL, key and
retries.

    export OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_...
    python generate_async.py
"""
import httpx
from openai import OpenAI

client = OpenAI()

job = client.post(
    "/images/generations",
    body={"prompt": "a red fox in the snow", "size": "512x512"},
    options={"params": {"async": "true"}},
    cast_to=object,  # the JSON as it is (a dict)
)
print("submitted:", job["id"], job["status"])

# A long poll returns when the job finishes, or after at most 30 s with the
# job as it is then: ask again until it is finished.
while job["status"] in ("pending", "processing"):
    job = client.get(f"/jobs/{job['id']}", options={"params": {"poll": "true"}}, cast_to=object)
    print("status:", job["status"], f"{job['progress']}%")

if job["status"] != "completed":
    raise SystemExit(f"the job ended {job['status']}: {job.get('errorMessage')}")
url = job["outputData"]["images"][0]["url"]
png = httpx.get(url).raise_for_status().content
print(f"image: {url} ({len(png)} bytes)")
