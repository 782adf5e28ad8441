"""The `standardwebhooks` PyPI library (the Standard Webhooks reference
implementation, pinned in tests/sdk/requirements.txt) verifying real
deliveries captured by a loopback receiver, given the webhook's secret
as-is. Run by the end-to-end test
`webhook_tools::the_standardwebhooks_library_verifies_real_deliveries_for_new_and_old_secrets`.

Environment: WEBHOOK_DELIVERIES, a JSON list of {"secret", "headers" (as
received, lowercase names), "body" (the raw body)}: the first signed with a
secret issued now (whsec_ + base64), the second with one issued before
Standard Webhooks (whsec_ + 64 hex).

Per delivery: the library accepts it and returns the envelope whose id is
`webhook-id` and `x-service-event-id`; the spec's `x-service-signature` is
the HMAC-SHA256 of "<timestamp>:<body>" keyed with the whole secret string;
the library rejects a changed body, another secret and another timestamp.
"""
import base64
import hashlib
import hmac
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from standardwebhooks.webhooks import Webhook, WebhookVerificationError  # noqa: E402

from sdkcheck import Checks  # noqa: E402


def rejected(secret, body, headers):
    """The library's verdict on a forged request: True when it refuses it."""
    try:
        Webhook(secret).verify(body, headers)
    except WebhookVerificationError:
        return True
    return False


def delivery(c, case):
    secret, headers, body = case["secret"], case["headers"], case["body"]
    envelope = Webhook(secret).verify(body, headers)
    c.check("the library verifies webhook-signature", isinstance(envelope, dict), envelope=envelope)
    c.check("webhook-id and x-service-event-id are the event id",
            envelope["id"] == headers["webhook-id"] == headers["x-service-event-id"],
            envelope=envelope, headers=headers)
    spec_signed = f"{headers['x-service-timestamp']}:{body}".encode()
    spec_signature = hmac.new(secret.encode(), spec_signed, hashlib.sha256).hexdigest()
    c.equal("x-service-signature keyed with the whole secret", headers["x-service-signature"],
            spec_signature)
    c.check("a changed body is rejected",
            rejected(secret, body.replace('"webhook.test"', '"webhook.tost"'), headers))
    other = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    c.check("another secret is rejected", rejected(other, body, headers))
    moved = dict(headers, **{"webhook-timestamp": str(int(headers["webhook-timestamp"]) - 1)})
    c.check("another timestamp is rejected", rejected(secret, body, moved))


def main():
    cases = json.loads(os.environ["WEBHOOK_DELIVERIES"])
    c = Checks("standardwebhooks")
    for label, case in zip(("new secret", "old hex secret"), cases):
        c.run(label, delivery, case)
    if len(cases) != 2:
        print(f"FAILED: expected 2 deliveries, got {len(cases)}", flush=True)
        sys.exit(1)
    c.finish()


main()
