"""Checking a webhook delivery's signature with the Standard Webhooks
reference library (``standardwebhooks``): a delivery verifies only under its
endpoint's secret, unchanged, and within five minutes of its timestamp."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Union

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from .errors import FlotillaError

__all__ = ["InvalidSignatureError", "verify"]


class InvalidSignatureError(FlotillaError):
    """A delivery whose signature, timestamp or headers do not verify."""


def verify(secret: str, body: Union[bytes, str], headers: Mapping[str, str]) -> Dict[str, Any]:
    """Verifies a delivery (its raw body and its ``webhook-id``,
    ``webhook-timestamp`` and ``webhook-signature`` headers) against the
    endpoint's ``whsec_`` secret and answers its JSON payload
    (``{"type", "timestamp", "data"}``); raises :class:`InvalidSignatureError`
    otherwise."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        payload = Webhook(secret).verify(body, lowered)
    except WebhookVerificationError as e:
        raise InvalidSignatureError(str(e)) from e
    if isinstance(payload, (bytes, str)):
        payload = json.loads(payload)
    return payload
