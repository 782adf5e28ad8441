"""The official OpenAI Python SDK's Files and Batches APIs (`client.files`,
`client.batches`) against a running unigen API, unchanged except for its
base URL and key. Run by the end-to-end test
`batches::the_openai_python_sdk_runs_a_batch_to_completion`, offline
against the built-in `local/echo` model: a batch of chat completions with
one line naming an unknown model, polled to `completed`, its output and
error files read back with every `custom_id` accounted for. See
../sdkcheck.py for the environment.
"""
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import openai  # noqa: E402

from sdkcheck import Checks  # noqa: E402

client = openai.OpenAI(max_retries=0, timeout=120)
GOOD = [f"req-{i}" for i in range(6)]


def request_line(custom_id, model, text):
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 32}}


def chat_batch(c):
    lines = [request_line(cid, "local/echo", f"hello {cid}") for cid in GOOD]
    lines.append(request_line("bad-model", "no-such/model", "hi"))
    data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    f = client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")
    c.equal("file object", f.object, "file")
    c.check("file id", f.id.startswith("file-"), id=f.id)
    c.equal("file bytes", f.bytes, len(data))
    c.equal("file purpose", f.purpose, "batch")
    c.equal("file name", f.filename, "requests.jsonl")
    c.equal("retrieve", client.files.retrieve(f.id).id, f.id)
    listed = client.files.list(purpose="batch")
    c.check("listed with purpose batch", any(x.id == f.id for x in listed.data), listed=listed)
    c.equal("content round trip", client.files.content(f.id).content, data)

    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                              completion_window="24h", metadata={"run": "sdk-check"})
    c.check("batch id", b.id.startswith("batch_"), id=b.id)
    c.equal("batch object", b.object, "batch")
    c.check("created in progress", b.status in ("validating", "in_progress"), status=b.status)
    c.equal("metadata", b.metadata, {"run": "sdk-check"})
    c.equal("total", b.request_counts.total, len(lines))
    deadline = time.time() + 120
    while b.status not in ("completed", "failed", "expired", "cancelled") and time.time() < deadline:
        time.sleep(0.2)
        b = client.batches.retrieve(b.id)
    c.equal("completed", b.status, "completed")
    c.equal("counts", (b.request_counts.total, b.request_counts.completed, b.request_counts.failed),
            (len(lines), len(GOOD), 1))
    c.check("timestamps", b.completed_at is not None and b.in_progress_at is not None
            and b.finalizing_at is not None and b.expires_at > b.created_at, batch=b)

    out = client.files.content(b.output_file_id).text
    outputs = [json.loads(line) for line in out.splitlines() if line.strip()]
    c.equal("every good custom_id in the output file", sorted(o["custom_id"] for o in outputs), sorted(GOOD))
    for o in outputs:
        body = o["response"]["body"]
        c.check(f"{o['custom_id']}: OpenAI output line", o["id"].startswith("batch_req_") and o["error"] is None
                and o["response"]["status_code"] == 200 and o["response"]["request_id"], line=o)
        c.equal(f"{o['custom_id']}: the model's answer", body["choices"][0]["message"]["content"],
                f"hello {o['custom_id']}")
        c.check(f"{o['custom_id']}: usage", body["usage"]["prompt_tokens"] > 0
                and body["usage"]["credits_used"] >= 1, usage=body["usage"])
    meta = client.files.retrieve(b.output_file_id)
    c.equal("output file purpose", meta.purpose, "batch_output")

    err = client.files.content(b.error_file_id).text
    errors = [json.loads(line) for line in err.splitlines() if line.strip()]
    c.equal("the failed line in the error file", [e["custom_id"] for e in errors], ["bad-model"])
    if errors:
        c.equal("its status", errors[0]["response"]["status_code"], 400)
        c.equal("its error names the model", errors[0]["response"]["body"]["error"]["param"], "model")

    c.check("listed", any(x.id == b.id for x in client.batches.list(limit=10).data))
    deleted = client.files.delete(f.id)
    c.check("deleted", deleted.deleted and deleted.id == f.id, deleted=deleted)
    try:
        client.files.retrieve(f.id)
        c.check("a deleted file is gone", False)
    except openai.NotFoundError:
        c.check("a deleted file is gone", True)


def errors(c):
    try:
        client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune")
        c.check("a wrong purpose is refused", False)
    except openai.BadRequestError as e:
        c.equal("a wrong purpose names the param", getattr(e, "param", None), "purpose")
    bad = client.files.create(file=("bad.jsonl", io.BytesIO(b'{"custom_id": "a", "method": "POST", '
                                                         b'"url": "/v1/chat/completions", "body": {}}\n{oops\n')),
                              purpose="batch")
    try:
        client.batches.create(input_file_id=bad.id, endpoint="/v1/chat/completions", completion_window="24h")
        c.check("a malformed file is refused", False)
    except openai.BadRequestError as e:
        c.check("a malformed file names its line", "line 2:" in str(e), error=str(e))
    try:
        client.batches.retrieve("batch_nope")
        c.check("an unknown batch is not found", False)
    except openai.NotFoundError:
        c.check("an unknown batch is not found", True)


def main():
    c = Checks("openai-python " + openai.__version__ + " batches")
    for name, flow in [("chat_batch", chat_batch), ("errors", errors)]:
        c.run(name, flow)
    c.finish()


if __name__ == "__main__":
    main()
