"""The resources of the services, as the JSON objects they send."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Generic, List, Optional, TypedDict, TypeVar

#: The statuses of a conversation.
STATUS_OPEN = "open"
STATUS_SNOOZED = "snoozed"
STATUS_CLOSED = "closed"


class Conversation(TypedDict):
    """A conversation (the Conversation schema of the OpenAPI document). Timestamps are RFC 3339
    UTC strings."""

    id: str
    subject: str
    #: ``open``, ``snoozed`` or ``closed``.
    status: str
    #: User ids (the ``sub`` of their tokens).
    participants: List[str]
    createdAt: str
    updatedAt: str
    #: ``None`` while the conversation has no message.
    lastMessageAt: Optional[str]


class Message(TypedDict):
    """A message of a conversation; messages are immutable."""

    id: str
    conversationId: str
    #: The ``sub`` of whoever posted it: a user id or a service client id.
    author: str
    body: str
    metadata: Dict[str, Any]
    createdAt: str


class Definition(TypedDict):
    """An integration definition of the caller's account."""

    id: str
    name: str
    #: The kind of integration, e.g. ``salesforce``.
    type: str
    config: Dict[str, Any]
    enabled: bool
    createdAt: str
    updatedAt: str


class User(TypedDict):
    """A user of the account, as a service client with ``users:read`` sees
    it; never a password or hash. ``name``, ``email`` and ``lastLoginAt``
    are ``None`` when unset."""

    id: str
    username: str
    name: Optional[str]
    email: Optional[str]
    disabled: bool
    createdAt: str
    updatedAt: str
    lastLoginAt: Optional[str]
    #: The user's active second factors: ``["totp"]`` or ``[]``.
    mfa: List[str]


class UserInfo(TypedDict, total=False):
    """Who the client's user is (OpenID Connect UserInfo); ``name`` and
    ``email`` only when set."""

    sub: str
    preferred_username: str
    name: str
    email: str
    email_verified: bool
    account_id: str
    account_name: str
    mfa: List[str]


class TotpEnrollment(TypedDict):
    """A begun TOTP enrolment: the secret (base32) and its ``otpauth://``
    URI, to show as a QR code."""

    secret: str
    otpauthUri: str


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing."""

    items: List[T] = field(default_factory=list)
    #: The absolute URL of the next page (from the ``Link`` header), ``None``
    #: on the last page.
    next_url: Optional[str] = None
