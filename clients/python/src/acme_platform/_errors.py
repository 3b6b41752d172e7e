"""The errors of the client: one type for every answer outside 2xx."""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Tuple

#: Stable machine-readable codes: the ``code`` of the services' problem
#: bodies (docs/errors.md) and the ``error`` of the token endpoint's OAuth
#: 2.0 error bodies (RFC 6749 section 5.2). New codes may appear; an answer
#: without a code has the code ``http_<status>``.
CODE_MALFORMED_JSON = "malformed_json"
CODE_VALIDATION_FAILED = "validation_failed"
CODE_INVALID_CREDENTIALS = "invalid_credentials"
CODE_INVALID_TOKEN = "invalid_token"
CODE_INSUFFICIENT_SCOPE = "insufficient_scope"
CODE_WEAK_PASSWORD = "weak_password"
CODE_USERNAME_TAKEN = "username_taken"
CODE_INVALID_CURRENT_PASSWORD = "invalid_current_password"
CODE_MFA_REQUIRED = "mfa_required"
CODE_INVALID_OTP = "invalid_otp"
CODE_MFA_ENROLLED = "mfa_enrolled"
CODE_MFA_NOT_STARTED = "mfa_not_started"
CODE_NOT_FOUND = "not_found"
CODE_METHOD_NOT_ALLOWED = "method_not_allowed"
CODE_CONFLICT = "conflict"
CODE_PRECONDITION_FAILED = "precondition_failed"
CODE_CONVERSATION_CLOSED = "conversation_closed"
CODE_TOO_MANY_ENDPOINTS = "too_many_endpoints"
CODE_TOO_MANY_PARTICIPANTS = "too_many_participants"
CODE_LAST_PARTICIPANT = "last_participant"
CODE_IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
CODE_CURSOR_EXPIRED = "cursor_expired"
CODE_BODY_TOO_LARGE = "body_too_large"
CODE_UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
CODE_TOO_MANY_REQUESTS = "too_many_requests"
CODE_SERVICE_UNAVAILABLE = "service_unavailable"
CODE_OVERLOADED = "overloaded"
CODE_MALFORMED_REQUEST = "malformed_request"
CODE_UNSUPPORTED_TRANSFER_ENCODING = "unsupported_transfer_encoding"
CODE_HEADERS_TOO_LARGE = "headers_too_large"
CODE_REQUEST_TIMEOUT = "request_timeout"
CODE_SLOW_DOWN = "slow_down"
CODE_TEMPORARILY_UNAVAILABLE = "temporarily_unavailable"
CODE_SERVER_ERROR = "server_error"
CODE_INTERNAL_ERROR = "internal_error"
CODE_INVALID_REQUEST = "invalid_request"
CODE_INVALID_CLIENT = "invalid_client"
CODE_INVALID_GRANT = "invalid_grant"
CODE_INVALID_SCOPE = "invalid_scope"
CODE_UNAUTHORIZED_CLIENT = "unauthorized_client"
CODE_UNSUPPORTED_GRANT_TYPE = "unsupported_grant_type"
#: The sign-in page's 403 for a form without this browser's CSRF token:
#: a browser sees it, never an API call.
CODE_INVALID_CSRF_TOKEN = "invalid_csrf_token"
#: The former name of :data:`CODE_SERVICE_UNAVAILABLE`.
CODE_UNAVAILABLE = CODE_SERVICE_UNAVAILABLE

# Retry-After values above a year are clamped: nobody waits that long.
_MAX_RETRY_AFTER = 365 * 24 * 3600.0


@dataclass(frozen=True)
class FieldError:
    """One offending input of a ``validation_failed`` problem."""

    #: The JSON member or query parameter, e.g. ``"limit"`` or
    #: ``"participants[2]"``.
    field: str
    #: A short human-readable explanation.
    reason: str


class ClientError(Exception):
    """Base class of every error this package raises."""


class TransportError(ClientError):
    """The request got no HTTP answer: connection refused or reset, timeout,
    unreadable response. It never names a secret."""

    def __init__(self, method: str, path: str, reason: str) -> None:
        self.method = method
        self.path = path
        self.reason = reason
        super().__init__(f"acme_platform: {method} {path}: {reason}")


class ApiError(ClientError):
    """An answer of a service outside 2xx, parsed from its problem body
    (RFC 9457), or from an OAuth 2.0 error body for ``/oauth2/token``.

    Switch on :attr:`code`, never on :attr:`title` or :attr:`detail`, which
    are for people. Its texts are the service's, unchanged; no secret is
    ever part of it, because the client never puts one there: the request's
    body and headers are not kept, and the services never echo a password
    or token.
    """

    method: str
    path: str
    status: int
    code: str
    type: str
    title: str
    detail: str
    instance: str
    field_errors: Tuple[FieldError, ...]
    retry_after: Optional[float]
    request_id: str

    def __init__(
        self,
        *,
        method: str,
        path: str,
        status: int,
        code: str,
        type: str = "",
        title: str = "",
        detail: str = "",
        instance: str = "",
        field_errors: Iterable[FieldError] = (),
        retry_after: Optional[float] = None,
        request_id: str = "",
    ) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.code = code
        self.type = type
        self.title = title
        self.detail = detail
        self.instance = instance
        #: The offending inputs of a 400 ``validation_failed``; empty otherwise.
        self.field_errors = tuple(field_errors)
        #: Seconds to wait before retrying (the ``Retry-After`` header of a
        #: 429 or 503), ``None`` when the answer has none.
        self.retry_after = retry_after
        #: The ``X-Request-ID`` of the answer: quote it in a bug report.
        self.request_id = request_id
        super().__init__(self._message())

    def _message(self) -> str:
        parts = [f"acme_platform: {self.method} {self.path}: {self.status} {self.code}"]
        if self.detail:
            parts.append(f": {self.detail}")
        if self.field_errors:
            parts.append(
                " (" + "; ".join(f"{f.field}: {f.reason}" for f in self.field_errors) + ")"
            )
        if self.retry_after is not None:
            parts.append(f" [retry after {self.retry_after:g}s]")
        if self.request_id:
            parts.append(f" [request id {self.request_id}]")
        return "".join(parts)

    def __repr__(self) -> str:
        return (
            f"ApiError(status={self.status!r}, code={self.code!r}, method={self.method!r}, "
            f"path={self.path!r}, field_errors={list(self.field_errors)!r}, retry_after={self.retry_after!r}, "
            f"request_id={self.request_id!r})"
        )

    def __reduce__(self) -> Any:
        # Exceptions pickle their args by default; ours are keyword-only.
        return (_rebuild_api_error, (self.__dict__.copy(),))


class MfaRequiredError(ApiError):
    """The user has a second factor: sign in again with a code of it
    (:meth:`Client.login_with_otp`). A 401 of ``POST /login`` (a 403 of
    :meth:`Client.change_password` without ``otp``); it never tells whether
    the password was right."""


def _rebuild_api_error(state: Mapping[str, Any]) -> ApiError:
    keys = (
        "method",
        "path",
        "status",
        "code",
        "type",
        "title",
        "detail",
        "instance",
        "field_errors",
        "retry_after",
        "request_id",
    )
    cls = MfaRequiredError if state["code"] == CODE_MFA_REQUIRED else ApiError
    return cls(**{k: state[k] for k in keys})


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Reads a Retry-After value: delay seconds or an HTTP date (RFC 9110
    section 10.2.3). Anything else, or a time in the past, gives None."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        secs = float(int(value))
        return min(secs, _MAX_RETRY_AFTER) if secs > 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    delta = when.timestamp() - (time.time() if now is None else now)
    return min(delta, _MAX_RETRY_AFTER) if delta > 0 else None


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def _excerpt(body: bytes, limit: int = 200) -> str:
    text = " ".join(body.decode("utf-8", errors="replace").split())
    return text if len(text) <= limit else text[:limit] + "\u2026"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def error_from_response(
    *,
    method: str,
    path: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    reason: str = "",
) -> ApiError:
    """Builds the ApiError of an answer outside 2xx. ``headers`` has
    lower-case names. Problem bodies give code, title, detail and field
    errors; an OAuth 2.0 error body (``{"error", "error_description"}``)
    gives code and detail; any other body the code ``http_<status>``. The
    texts are taken as the service wrote them."""
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    doc: Any = None
    if _is_json(media_type):
        try:
            doc = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            # RecursionError: nested deeper than the interpreter's stack
            # allows; such a body is no problem document.
            doc = None
    code = type_ = title = detail = instance = ""
    fields: List[FieldError] = []
    if isinstance(doc, dict) and (doc.get("code") or doc.get("type") or doc.get("title")):
        code, type_, title = _str(doc.get("code")), _str(doc.get("type")), _str(doc.get("title"))
        detail, instance = _str(doc.get("detail")), _str(doc.get("instance"))
        raw_fields = doc.get("errors")
        if isinstance(raw_fields, list):
            for item in raw_fields:
                if isinstance(item, dict):
                    fields.append(FieldError(_str(item.get("field")), _str(item.get("reason"))))
    elif isinstance(doc, dict) and isinstance(doc.get("error"), str):
        code, title = doc["error"], reason
        detail = _str(doc.get("error_description"))
    else:
        title = reason
        if media_type.startswith("text/") or _is_json(media_type):
            detail = _excerpt(body)
    cls = MfaRequiredError if code == CODE_MFA_REQUIRED else ApiError
    return cls(
        method=method,
        path=path,
        status=status,
        code=code or f"http_{status}",
        type=type_,
        title=title,
        detail=detail,
        instance=instance,
        field_errors=fields,
        retry_after=parse_retry_after(headers.get("retry-after")),
        request_id=headers.get("x-request-id", ""),
    )
