"""Webhook verification: a delivery signed as the API signs it verifies; a
changed body, another secret or an old timestamp do not."""

import datetime
import json

import pytest
from standardwebhooks.webhooks import Webhook

from flotilla import webhooks

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def signed(body, at=None, secret=SECRET):
    at = at or datetime.datetime.now(tz=datetime.timezone.utc)
    return {
        "Webhook-Id": "msg_1",
        "Webhook-Timestamp": str(int(at.timestamp())),
        "Webhook-Signature": Webhook(secret).sign("msg_1", at, body),
    }


def test_a_signed_delivery_verifies_and_answers_its_payload():
    body = json.dumps({"type": "task.succeeded", "timestamp": "t", "data": {"id": "tsk_1"}})
    assert webhooks.verify(SECRET, body.encode(), signed(body))["data"]["id"] == "tsk_1"


def test_a_forged_or_stale_delivery_is_rejected():
    body = json.dumps({"type": "task.succeeded", "data": {"id": "tsk_1"}})
    headers = signed(body)
    with pytest.raises(webhooks.InvalidSignatureError):
        webhooks.verify(SECRET, body.replace("tsk_1", "tsk_2"), headers)
    with pytest.raises(webhooks.InvalidSignatureError):
        webhooks.verify(SECRET, body, signed(body, secret="whsec_" + "A" * 32))
    old = datetime.datetime.now(tz=datetime.timezone.utc) - datetime.timedelta(minutes=6)
    with pytest.raises(webhooks.InvalidSignatureError):
        webhooks.verify(SECRET, body, signed(body, at=old))
