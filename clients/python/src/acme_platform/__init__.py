"""A client of the Acme account and conversations services.

    from acme_platform import Client

    client = Client(account_url="http://localhost:8080",
                    conversations_url="http://localhost:8081",
                    username="alice", password="...", account_name="acme")
    for conversation in client.conversations(limit=50):
        print(conversation["id"], conversation["subject"])

See the README for errors, renewal and retries.
"""

from ._client import Client, MemoryTokenStore, Session, TokenStore
from ._errors import (
    CODE_BODY_TOO_LARGE,
    CODE_CONFLICT,
    CODE_CONVERSATION_CLOSED,
    CODE_IDEMPOTENCY_KEY_REUSED,
    CODE_INSUFFICIENT_SCOPE,
    CODE_INTERNAL_ERROR,
    CODE_INVALID_CLIENT,
    CODE_INVALID_CREDENTIALS,
    CODE_INVALID_GRANT,
    CODE_INVALID_REQUEST,
    CODE_INVALID_SCOPE,
    CODE_INVALID_TOKEN,
    CODE_LAST_PARTICIPANT,
    CODE_MALFORMED_JSON,
    CODE_METHOD_NOT_ALLOWED,
    CODE_NOT_FOUND,
    CODE_OVERLOADED,
    CODE_PRECONDITION_FAILED,
    CODE_SERVICE_UNAVAILABLE,
    CODE_TOO_MANY_PARTICIPANTS,
    CODE_TOO_MANY_REQUESTS,
    CODE_UNAUTHORIZED_CLIENT,
    CODE_UNAVAILABLE,
    CODE_UNSUPPORTED_GRANT_TYPE,
    CODE_UNSUPPORTED_MEDIA_TYPE,
    CODE_VALIDATION_FAILED,
    ApiError,
    ClientError,
    FieldError,
    TransportError,
)
from ._secret import Secret
from ._types import (
    STATUS_CLOSED,
    STATUS_OPEN,
    STATUS_SNOOZED,
    Conversation,
    Definition,
    Message,
    Page,
)

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "Client",
    "ClientError",
    "CODE_BODY_TOO_LARGE",
    "CODE_CONFLICT",
    "CODE_CONVERSATION_CLOSED",
    "CODE_IDEMPOTENCY_KEY_REUSED",
    "CODE_INSUFFICIENT_SCOPE",
    "CODE_INTERNAL_ERROR",
    "CODE_INVALID_CLIENT",
    "CODE_INVALID_CREDENTIALS",
    "CODE_INVALID_GRANT",
    "CODE_INVALID_REQUEST",
    "CODE_INVALID_SCOPE",
    "CODE_INVALID_TOKEN",
    "CODE_LAST_PARTICIPANT",
    "CODE_MALFORMED_JSON",
    "CODE_METHOD_NOT_ALLOWED",
    "CODE_NOT_FOUND",
    "CODE_OVERLOADED",
    "CODE_PRECONDITION_FAILED",
    "CODE_SERVICE_UNAVAILABLE",
    "CODE_TOO_MANY_PARTICIPANTS",
    "CODE_TOO_MANY_REQUESTS",
    "CODE_UNAUTHORIZED_CLIENT",
    "CODE_UNAVAILABLE",
    "CODE_UNSUPPORTED_GRANT_TYPE",
    "CODE_UNSUPPORTED_MEDIA_TYPE",
    "CODE_VALIDATION_FAILED",
    "Conversation",
    "Definition",
    "FieldError",
    "MemoryTokenStore",
    "Message",
    "Page",
    "Secret",
    "Session",
    "STATUS_CLOSED",
    "STATUS_OPEN",
    "STATUS_SNOOZED",
    "TokenStore",
    "TransportError",
]
