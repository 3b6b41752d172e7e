"""Verifying webhook deliveries (Standard Webhooks v1)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Any, Iterable, Literal, Mapping, Optional, TypedDict, Union, cast

from ._events import Event

#: How far a delivery's ``webhook-timestamp`` may be from the receiver's clock.
WEBHOOK_TOLERANCE_SECONDS = 5 * 60

EVENT_WEBHOOK_TEST: Literal["webhook.test"] = "webhook.test"


class WebhookTestData(TypedDict):
    """The data of ``webhook.test``: the endpoint tested."""

    endpointId: str


class WebhookTestEvent(TypedDict):
    """A test delivery (``test_webhook``): never in the feed, so its
    ``sequence`` is None."""

    id: str
    type: Literal["webhook.test"]
    sequence: None
    timestamp: str
    data: WebhookTestData


WebhookEvent = Union[Event, WebhookTestEvent]
"""A verified event: an event of the feed (``Event``, narrowed by
``event["type"]`` as the feed's), or a test delivery. Its ``id`` is also
``webhook-id``, the same on every attempt: drop repeats of one you handled.
Deliveries may arrive out of order: order by ``sequence``."""


class WebhookVerificationError(Exception):
    """A refused delivery; ``reason`` is ``headers``, ``timestamp``,
    ``signature``, ``payload`` or ``secret``. Answer it with a 400."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("webhook: " + message)
        self.reason = reason


def _header(headers: Mapping[str, Any], name: str) -> Optional[str]:
    for key, value in headers.items():
        if key.lower() == name:
            if isinstance(value, (list, tuple)):
                return ", ".join(value)
            return str(value)
    return None


def _b64(value: str) -> Optional[bytes]:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def verify_webhook(
    secrets: Union[str, Iterable[str]],
    headers: Mapping[str, Any],
    raw_body: Union[bytes, str],
    *,
    now: Optional[float] = None,
) -> WebhookEvent:
    """Verifies a delivery: the signature over ``webhook-id``,
    ``webhook-timestamp`` and the raw body under any of ``secrets``
    (several while a secret is rotated), compared in constant time, and the
    timestamp within 5 minutes of ``now``, in seconds since the epoch
    (default: the clock). Pass the body exactly as received. Returns the
    event; raises WebhookVerificationError."""
    msg_id = _header(headers, "webhook-id")
    ts = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    if not msg_id or not ts or not signatures:
        raise WebhookVerificationError(
            "headers", "missing webhook-id, webhook-timestamp or webhook-signature"
        )
    if not ts.isdigit():
        raise WebhookVerificationError("headers", "webhook-timestamp is not Unix seconds")
    current = int(time.time() if now is None else now)
    if abs(current - int(ts)) > WEBHOOK_TOLERANCE_SECONDS:
        raise WebhookVerificationError(
            "timestamp", "webhook-timestamp is more than 5 minutes from now"
        )
    body = raw_body.encode("utf-8") if isinstance(raw_body, str) else bytes(raw_body)
    signed = f"{msg_id}.{ts}.".encode() + body
    expected = []
    for secret in [secrets] if isinstance(secrets, str) else list(secrets):
        key = _b64(secret[6:] if secret.startswith("whsec_") else secret)
        if not key:
            raise WebhookVerificationError("secret", "a secret is not whsec_ and base64")
        expected.append(hmac.new(key, signed, hashlib.sha256).digest())
    matched = False
    for versioned in signatures.split(" "):
        version, _, sig = versioned.partition(",")
        if version != "v1":
            continue
        got = _b64(sig)
        if got is None:
            continue
        for want in expected:
            if hmac.compare_digest(got, want):  # every comparison runs
                matched = True
    if not matched:
        raise WebhookVerificationError("signature", "no signature matches any of the secrets")
    try:
        event = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise WebhookVerificationError("payload", "the body is not JSON") from None
    if (
        not isinstance(event, dict)
        or not isinstance(event.get("id"), str)
        or not isinstance(event.get("type"), str)
    ):
        raise WebhookVerificationError("payload", "the body is not an event")
    if event["id"] != msg_id:
        raise WebhookVerificationError("payload", "the body's id is not the webhook-id")
    return cast(WebhookEvent, event)
