"""The client of the account and conversations services."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import threading
import time
import urllib.parse
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import (
    Any,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Union,
    cast,
)

from ._errors import (
    CODE_INVALID_TOKEN,
    ApiError,
    ClientError,
    TransportError,
    error_from_response,
)
from ._events import (
    DEFAULT_EVENT_PAGE_SIZE,
    STREAM_READ_TIMEOUT,
    Event,
    EventFeed,
    EventPage,
    EventStream,
    check_position,
    events_query,
    position_of,
)
from ._http import Response, Transport
from ._links import LinkHeaderError, next_link, resolve_link
from ._secret import Secret
from ._types import Conversation, Definition, Message, Page, TotpEnrollment, User, UserInfo

__all__ = ["Client", "MemoryTokenStore", "Session", "TokenStore"]

logger = logging.getLogger("acme_platform")

USER_AGENT = "acme-platform-python/0.1"

#: The largest margin before expiry at which a session is renewed; for short
#: lifetimes the margin is a tenth of the lifetime.
MAX_RENEW_MARGIN = 60.0

#: Statuses after which a safe or idempotency-keyed request is retried.
_RETRY_STATUSES = frozenset({429, 502, 503, 504})

#: How many conversations' last ETags a client remembers.
_ETAG_CACHE_SIZE = 1024


@dataclass(frozen=True)
class Session:
    """The tokens of a logged-in client. Its secrets are :class:`Secret`
    values, so that printing a session shows none of them."""

    #: The bearer token: the id token of a user, the access token of a
    #: service client.
    bearer: Secret
    #: The refresh token (users only; single-use: each refresh brings a new
    #: one), ``None`` when there is none.
    refresh_token: Optional[Secret]
    #: When the bearer expires, in seconds since the epoch (``time.time()``).
    expires_at: float
    #: The lifetime of the bearer in seconds (``expires_in``).
    lifetime: float

    def renew_at(self) -> float:
        """When the client renews this session: a tenth of its lifetime
        (at most a minute) before it expires."""
        return self.expires_at - renew_margin(self.lifetime)


class TokenStore(Protocol):
    """Where a client keeps its session: by default in memory; a program
    that runs as many short processes (a CLI, a PHP-style worker) may keep
    it in a file or a cache, so that each process need not log in again.
    A store holds secrets: keep it private."""

    def load(self) -> Optional[Session]:
        """The stored session, ``None`` when there is none."""

    def save(self, session: Optional[Session]) -> None:
        """Stores the session; ``None`` forgets it (logout)."""


class MemoryTokenStore:
    """The default :class:`TokenStore`: one session in memory."""

    def __init__(self, session: Optional[Session] = None) -> None:
        self._session = session

    def load(self) -> Optional[Session]:
        return self._session

    def save(self, session: Optional[Session]) -> None:
        self._session = session

    def __repr__(self) -> str:
        return f"MemoryTokenStore(session={'set' if self._session else None})"


def renew_margin(lifetime: float) -> float:
    """How long before expiry a token set of this lifetime is renewed."""
    return min(MAX_RENEW_MARGIN, lifetime / 10)


def _session_of(path: str, start: float, tokens: Any, bearer_keys: Sequence[str]) -> Session:
    """The session a token set from ``POST {path}`` holds: its bearer (the
    first of ``bearer_keys`` it has), refresh token and lifetime, counted
    from ``start``, the request's start (earlier is safe)."""
    if not isinstance(tokens, dict):
        tokens = {}
    bearer = next((tokens[key] for key in bearer_keys if tokens.get(key)), None)
    expires_in = tokens.get("expires_in")
    if (
        not isinstance(bearer, str)
        or not bearer
        or not isinstance(expires_in, (int, float))
        or expires_in < 1
    ):
        raise ClientError(
            f"acme_platform: POST {path}: the response has no token or no positive expires_in"
        )
    refresh = tokens.get("refresh_token")
    lifetime = float(min(expires_in, 365 * 24 * 3600))
    return Session(
        bearer=Secret(bearer),
        refresh_token=Secret(refresh) if isinstance(refresh, str) and refresh else None,
        expires_at=start + lifetime,
        lifetime=lifetime,
    )


def _with_query(url: str, query: Mapping[str, Any]) -> str:
    """``url`` with the query of the members of ``query`` that are not
    None."""
    given = {name: str(value) for name, value in query.items() if value is not None}
    return url + ("?" + urllib.parse.urlencode(given) if given else "")


def _base_url(name: str, raw: Optional[str]) -> Optional[str]:
    if raw is None or raw == "":
        return None
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{name}: want an absolute http or https URL, such as http://localhost:8080"
        )
    if parts.username is not None or parts.query or parts.fragment:
        raise ValueError(f"{name}: want a base URL without user info, query or fragment")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class Client:
    """Calls the account and conversations services as one user (password
    login) or one service client (client credentials).

    Give either ``username``, ``password`` and ``account_name``, or
    ``client_id`` and ``client_secret``. The client logs in on the first call
    that needs a token, and renews the session before it expires: it
    refreshes first (``POST /token/refresh``) and logs in again when the
    refresh is refused. It is safe to share between threads; one renewal
    runs at a time.

    Every answer outside 2xx raises :class:`ApiError`; a request that gets
    no answer raises :class:`TransportError`. Reads, and creations (which
    carry an ``Idempotency-Key``), are retried up to ``max_retries`` times
    after a lost connection, a 502, 503 or 504, or a 429 whose
    ``Retry-After`` is at most ``max_retry_wait`` seconds.

    ``account_url`` and ``conversations_url`` are the services' base URLs
    (the latter may carry a path prefix, e.g. behind a gateway; it is only
    needed for the conversation methods). ``scope`` narrows the scopes of a
    service client's token. ``timeout`` bounds each request, in seconds.
    ``token_store`` keeps the session (see :class:`TokenStore`; in memory by
    default). ``ssl_context`` verifies HTTPS servers (the system's trust
    store by default).
    """

    def __init__(
        self,
        *,
        account_url: str,
        conversations_url: Optional[str] = None,
        username: Optional[str] = None,
        password: Optional[str] = None,
        account_name: Optional[str] = None,
        client_id: Optional[str] = None,
        client_secret: Optional[str] = None,
        scope: Optional[str] = None,
        timeout: float = 10.0,
        max_retries: int = 2,
        max_retry_wait: float = 10.0,
        token_store: Optional[TokenStore] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        account = _base_url("account_url", account_url)
        if account is None:
            raise ValueError("account_url is required")
        self._account_url = account
        self._conversations_url = _base_url("conversations_url", conversations_url)
        user_creds = (username, password, account_name)
        client_creds = (client_id, client_secret)
        if any(user_creds) and any(client_creds):
            raise ValueError(
                "give either username, password and account_name, "
                "or client_id and client_secret, not both"
            )
        if any(client_creds):
            if not client_id or not client_secret:
                raise ValueError("client credentials need both client_id and client_secret")
        elif not all(user_creds):
            raise ValueError(
                "username, password and account_name are all required "
                "(or client_id and client_secret)"
            )
        if max_retries < 0 or max_retry_wait < 0 or timeout <= 0:
            raise ValueError(
                "timeout must be positive, max_retries and max_retry_wait not negative"
            )
        self._username = username
        self._account_name = account_name
        self._password = Secret(password) if password else None
        self._client_id = client_id
        self._client_secret = Secret(client_secret) if client_secret else None
        self._scope = scope
        self._max_retries = max_retries
        self._max_retry_wait = max_retry_wait
        self._transport = Transport(timeout, ssl_context)

        # The session; guarded by _lock, which is also held during a renewal,
        # so that one renewal runs at a time and the others wait for it.
        self._lock = threading.Lock()
        self._store_of_tokens: TokenStore = (
            token_store if token_store is not None else MemoryTokenStore()
        )
        self._session: Optional[Session] = None
        self._loaded = False  # whether the store has been read
        self._generation = 0  # incremented whenever the session changes
        self._stale = False  # a service refused the bearer of this generation

        self._etags_lock = threading.Lock()
        self._etags: "OrderedDict[str, str]" = OrderedDict()

    def __repr__(self) -> str:
        who = (
            f"client_id={self._client_id!r}"
            if self._client_id
            else f"username={self._username!r}, account_name={self._account_name!r}"
        )
        return (
            f"Client(account_url={self._account_url!r}, "
            f"conversations_url={self._conversations_url!r}, {who})"
        )

    def __reduce__(self) -> Any:
        raise TypeError("a Client holds credentials and cannot be pickled")

    # -- session ---------------------------------------------------------

    def login(self) -> None:
        """Logs in now (``POST /login`` or ``POST /oauth2/token``) rather
        than on the first call: useful to check the credentials at start-up.
        Raises :class:`ApiError` with code ``invalid_credentials`` (or
        ``invalid_client``) when they are wrong."""
        with self._lock:
            self._loaded = True
            self._keep(self._log_in())

    def login_with_otp(self, otp: str) -> None:
        """Logs in with a code of the user's second factor (a current TOTP
        code or an unused recovery code), after a call raised
        :class:`MfaRequiredError`. A code is accepted once: a later login
        needs a new one. A wrong code raises :class:`ApiError`
        ``invalid_credentials``, as a wrong password does."""
        if self._client_id:
            raise ClientError(
                "acme_platform: login_with_otp: a service client has no second factor"
            )
        session = self._password_login(otp)
        with self._lock:
            self._loaded = True
            self._keep(session)

    def logout(self) -> None:
        """Ends the session: revokes its refresh token (``POST /logout``)
        and forgets the tokens, in the token store too. The next call logs
        in again."""
        with self._lock:
            session = self._session if self._loaded else self._store_of_tokens.load()
            self._session, self._loaded, self._stale = None, True, False
            self._generation += 1
            self._store_of_tokens.save(None)
        if session is not None and session.refresh_token is not None:
            refresh = session.refresh_token
            self._exchange(
                "POST",
                self._account_url + "/logout",
                body=Secret(json.dumps({"refresh_token": refresh.reveal()})),
                content_type="application/json",
            )

    def _current_bearer(self) -> Tuple[Secret, int]:
        """A bearer token that does not expire within the margin, and the
        generation of its session."""
        with self._lock:
            if not self._loaded:
                self._session, self._loaded = self._store_of_tokens.load(), True
            session = self._session
            if session is not None and not self._stale and time.time() < session.renew_at():
                return session.bearer, self._generation
            session = self._keep(self._renew())
            # Used as is even if the clock already says it is due: a server
            # that issues tokens of a few seconds must not make us loop.
            return session.bearer, self._generation

    def _invalidate(self, generation: int) -> None:
        with self._lock:
            if self._generation == generation:
                self._stale = True

    def _keep(self, session: Session) -> Session:
        """Makes session the current one; _lock is held."""
        self._session, self._stale = session, False
        self._generation += 1
        self._store_of_tokens.save(session)
        return session

    def _renew(self) -> Session:
        """Refreshes the session when it has a refresh token, and logs in
        when it has none or the refresh is refused (401: spent, revoked or
        expired; 404: no refresh endpoint). _lock is held."""
        session = self._session
        if session is not None and session.refresh_token is not None:
            refresh = session.refresh_token
            try:
                renewed = self._token_request(
                    "/token/refresh",
                    Secret(json.dumps({"refresh_token": refresh.reveal()})),
                    "application/json",
                    None,
                )
                logger.debug("session renewed by refresh")
                return renewed
            except ApiError as err:
                if err.status not in (401, 404):
                    raise
                # Never offer a refused refresh token again.
                self._session = replace(session, refresh_token=None)
                self._store_of_tokens.save(self._session)
                logger.info("refresh refused (%s %s); logging in again", err.status, err.code)
        return self._log_in()

    def _log_in(self) -> Session:
        if self._client_secret is not None:
            assert self._client_id is not None
            form = {"grant_type": "client_credentials"}
            if self._scope:
                form["scope"] = self._scope
            # RFC 6749 section 2.3.1: both form-encoded, then Basic.
            encoded = Secret(
                base64.b64encode(
                    (
                        urllib.parse.quote_plus(self._client_id)
                        + ":"
                        + urllib.parse.quote_plus(self._client_secret.reveal())
                    ).encode()
                ).decode("ascii")
            )
            session = self._token_request(
                "/oauth2/token",
                urllib.parse.urlencode(form).encode(),
                "application/x-www-form-urlencoded",
                Secret("Basic " + encoded.reveal()),
            )
            logger.debug("obtained an access token with client credentials")
            return session
        session = self._password_login(None)
        logger.debug("logged in")
        return session

    def _password_login(self, otp: Optional[str]) -> Session:
        """``POST /login`` with the user's credentials and ``otp``, a code of
        their second factor (``None`` for none)."""
        assert self._password is not None
        extra = {"otp": otp} if otp is not None else {}
        # Wrapped at once: no local variable holds the password in clear, so
        # that a traceback captured with its locals does not show it.
        return self._token_request(
            "/login",
            Secret(
                json.dumps(
                    {
                        "username": self._username,
                        "password": self._password.reveal(),
                        "accountName": self._account_name,
                        **extra,
                    }
                )
            ),
            "application/json",
            None,
        )

    def _token_request(
        self,
        path: str,
        body: Union[bytes, Secret],
        content_type: str,
        authorization: Optional[Secret],
    ) -> Session:
        """Posts to a token endpoint and reads the token set: the bearer
        (id token for a user, access token for a service client) and the
        refresh token."""
        start = time.time()  # expires_in counts from the answer: earlier is safe
        resp = self._exchange(
            "POST",
            self._account_url + path,
            body=body,
            content_type=content_type,
            authorization=authorization,
        )
        doc = self._json(resp, "POST", self._account_url + path)
        tokens = doc.get("tokens", doc) if isinstance(doc, dict) else None
        if not isinstance(tokens, dict):
            raise ClientError(f"acme_platform: POST {path}: the response holds no token set")
        return _session_of(path, start, tokens, ("id_token", "access_token"))

    # -- HTTP ------------------------------------------------------------

    def _exchange(
        self,
        method: str,
        url: str,
        *,
        body: Union[bytes, Secret, None] = None,
        content_type: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        authorization: Optional[Secret] = None,
        stream: bool = False,
    ) -> Response:
        """One request; an answer outside 2xx raises ApiError. Nothing of
        the request but its method and path goes into the error, so no
        secret can. With ``stream``, a 2xx answer comes unread
        (``Response.stream``)."""
        send: Dict[str, str] = {
            "Accept": "application/json, application/problem+json",
            "User-Agent": USER_AGENT,
        }
        if content_type:
            send["Content-Type"] = content_type
        if headers:
            send.update(headers)
        resp = self._transport.send(
            method,
            url,
            send,
            body,
            authorization,
            stream=stream,
            timeout=STREAM_READ_TIMEOUT if stream else None,
        )
        if 200 <= resp.status < 300:
            return resp
        raise error_from_response(
            method=method,
            path=urllib.parse.urlsplit(url).path,
            status=resp.status,
            headers=resp.headers,
            body=resp.body,
            reason=resp.reason,
        )

    def _call(
        self,
        method: str,
        url: str,
        *,
        payload: Any = None,
        content_type: str = "application/json",
        headers: Optional[Mapping[str, str]] = None,
        retry: bool = False,
        stream: bool = False,
    ) -> Response:
        """An authenticated request with ``payload`` as its JSON body (unless
        None). A 401 invalid_token renews the session and repeats the request
        once; with ``retry``, lost connections and 429/502/503/504 are
        retried as the class documents."""
        body = json.dumps(payload).encode() if payload is not None else None
        renewed = False
        attempt = 0
        while True:
            bearer, generation = self._current_bearer()
            try:
                return self._exchange(
                    method,
                    url,
                    body=body,
                    content_type=content_type if body is not None else None,
                    headers=headers,
                    authorization=Secret("Bearer " + bearer.reveal()),
                    stream=stream,
                )
            except ApiError as err:
                if err.status == 401 and err.code == CODE_INVALID_TOKEN and not renewed:
                    renewed = True
                    self._invalidate(generation)
                    continue
                if not (retry and err.status in _RETRY_STATUSES and attempt < self._max_retries):
                    raise
                wait = err.retry_after if err.retry_after is not None else 0.25 * 2**attempt
                if wait > self._max_retry_wait:
                    raise
                cause = f"{err.status} {err.code}"
            except TransportError as err:
                if not (retry and attempt < self._max_retries):
                    raise
                wait, cause = 0.25 * 2**attempt, err.reason
            attempt += 1
            logger.info(
                "%s %s: %s; retry %d in %.2fs",
                method,
                urllib.parse.urlsplit(url).path,
                cause,
                attempt,
                wait,
            )
            time.sleep(wait)

    def _json(self, resp: Response, method: str, url: str) -> Any:
        path = urllib.parse.urlsplit(url).path
        try:
            return json.loads(resp.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ClientError(
                f"acme_platform: {method} {path}: the response is not JSON"
            ) from None
        except RecursionError:
            # The json module recurses once per level of nesting: a body
            # nested deeper than the interpreter's stack allows (a stored
            # metadata thousands of levels deep) is this client's error,
            # not a crash of the caller.
            raise ClientError(
                f"acme_platform: {method} {path}: the response is nested too deeply to parse"
            ) from None

    def _conversations(self, path: str) -> str:
        if self._conversations_url is None:
            raise ClientError("acme_platform: conversations_url is not configured")
        return self._conversations_url + path

    def _page(
        self, first_url: str, next_url: Optional[str], base: Optional[str] = None
    ) -> Page[Any]:
        """GETs one page of a listing: ``first_url`` or, when given, the
        next link of the previous page; ``base`` is the service's root
        (the conversations service's by default)."""
        if base is None:
            base = self._conversations("")
        url = first_url if next_url is None else resolve_link(base, first_url, next_url)
        resp = self._call("GET", url, retry=True)
        items = self._json(resp, "GET", url)
        if not isinstance(items, list):
            raise ClientError(
                f"acme_platform: GET {urllib.parse.urlsplit(url).path}: "
                "the response is no JSON array"
            )
        try:
            target = next_link(resp.links)
            following = resolve_link(base, url, target) if target is not None else None
        except LinkHeaderError as err:
            raise ClientError(
                f"acme_platform: GET {urllib.parse.urlsplit(url).path}: {err}"
            ) from None
        return Page(items=items, next_url=following)

    def _walk(self, first_url: str, base: Optional[str] = None) -> Iterator[Page[Any]]:
        seen = set()
        next_url: Optional[str] = None
        while True:
            page = self._page(first_url, next_url, base)
            yield page
            if page.next_url is None:
                return
            if page.next_url in seen:
                raise ClientError("acme_platform: the next link repeats an earlier page")
            seen.add(page.next_url)
            next_url = page.next_url

    def _remember_etag(self, conversation_id: str, resp: Response) -> None:
        etag = resp.headers.get("etag")
        if not etag:
            return
        with self._etags_lock:
            self._etags[conversation_id] = etag
            self._etags.move_to_end(conversation_id)
            while len(self._etags) > _ETAG_CACHE_SIZE:
                self._etags.popitem(last=False)

    def etag(self, conversation_id: str) -> Optional[str]:
        """The last ``ETag`` this client saw for the conversation (from a
        get, create or update), ``None`` when it saw none."""
        with self._etags_lock:
            return self._etags.get(conversation_id)

    # -- account service ------------------------------------------------

    def list_definitions(self) -> List[Definition]:
        """The integration definitions of the caller's account
        (``GET /definitions``); an empty list when there are none."""
        url = self._account_url + "/definitions"
        doc = self._json(self._call("GET", url, retry=True), "GET", url)
        if doc is None:
            return []
        if not isinstance(doc, list):
            raise ClientError("acme_platform: GET /definitions: the response is no JSON array")
        return cast(List[Definition], doc)

    # -- users (a service client with users:read / users:write) ---------

    def _user_url(self, user_id: str) -> str:
        if not user_id:
            raise ValueError("a user id is required")
        return self._account_url + "/users/" + urllib.parse.quote(user_id, safe="")

    def create_user(
        self,
        *,
        username: str,
        password: str,
        name: Optional[str] = None,
        email: Optional[str] = None,
    ) -> User:
        """Signs a user up in the service client's account
        (``POST /users``, scope ``users:write``). A taken name raises
        :class:`ApiError` 409 ``username_taken``; a password the policy
        refuses 400 ``weak_password``, whose ``errors`` say why."""
        doc: Dict[str, Any] = {"username": username, "password": password}
        if name is not None:
            doc["name"] = name
        if email is not None:
            doc["email"] = email
        url = self._account_url + "/users"
        # Wrapped at once, like a login's body: no secret in a local.
        body = Secret(json.dumps(doc))
        del doc
        resp = self._call_body("POST", url, body)
        return cast(User, self._json(resp, "POST", url))

    def get_user(self, user_id: str) -> User:
        """A user of the account (``GET /users/{id}``, ``users:read``); an
        id of another account raises 404 ``not_found``."""
        url = self._user_url(user_id)
        return cast(User, self._json(self._call("GET", url, retry=True), "GET", url))

    def user_pages(
        self, *, limit: Optional[int] = None, username: Optional[str] = None
    ) -> Iterator[Page[User]]:
        """The account's users page by page, oldest first
        (``GET /users``, ``users:read``), following ``Link: rel="next"``.
        ``username`` lists only the user of that name (exact,
        case-insensitive)."""
        url = _with_query(self._account_url + "/users", {"limit": limit, "username": username})
        return cast(Iterator[Page[User]], self._walk(url, self._account_url))

    def users(
        self, *, limit: Optional[int] = None, username: Optional[str] = None
    ) -> Iterator[User]:
        """Every user of the account, oldest first, across all pages."""
        for page in self.user_pages(limit=limit, username=username):
            yield from page.items

    def update_user(self, user_id: str, **patch: Any) -> User:
        """Changes ``name``, ``email`` (``None`` clears either) or
        ``disabled`` of a user: a JSON merge patch (``PATCH /users/{id}``,
        ``users:write``). Disabling ends every session of the user."""
        unknown = set(patch) - {"name", "email", "disabled"}
        if unknown:
            raise ValueError(
                f"update_user: only name, email and disabled may change, not {sorted(unknown)}"
            )
        url = self._user_url(user_id)
        resp = self._call("PATCH", url, payload=patch, content_type="application/merge-patch+json")
        return cast(User, self._json(resp, "PATCH", url))

    def set_user_password(self, user_id: str, password: str) -> None:
        """Sets a user's password (``PUT /users/{id}/password``,
        ``users:write``); every session of the user ends."""
        self._call_body(
            "PUT",
            self._user_url(user_id) + "/password",
            Secret(json.dumps({"password": password})),
        )

    def delete_user(self, user_id: str) -> None:
        """Erases a user: its document, sessions and login counters
        (``DELETE /users/{id}``, ``users:write``)."""
        self._call("DELETE", self._user_url(user_id))

    # -- self-service (a user's own session) ------------------------------

    def user_info(self) -> UserInfo:
        """Who the client's user is (``GET /userinfo``, OpenID Connect
        UserInfo). A service client has no user."""
        if self._client_id:
            raise ClientError("acme_platform: user_info: a service client has no user")
        url = self._account_url + "/userinfo"
        return cast(UserInfo, self._json(self._call("GET", url, retry=True), "GET", url))

    def change_password(
        self, current_password: str, new_password: str, otp: Optional[str] = None
    ) -> None:
        """Changes the password of the client's user (``POST /password``).
        The service ends every session of the user and answers with the
        tokens of a new one, which this client keeps (and the new password
        for later logins). A wrong current password raises
        :class:`ApiError` 403 ``invalid_current_password``; repeated ones
        are throttled like logins (429). A user with a second factor gives
        ``otp`` too, else :class:`MfaRequiredError` (403)."""
        if self._client_id:
            raise ClientError("acme_platform: change_password: a service client has no password")
        url = self._account_url + "/password"
        start = time.time()
        body: Dict[str, str] = {"currentPassword": current_password, "newPassword": new_password}
        if otp:
            body["otp"] = otp
        resp = self._call_body("POST", url, Secret(json.dumps(body)))
        doc = self._json(resp, "POST", url)
        tokens = doc.get("tokens") if isinstance(doc, dict) else None
        session = _session_of("/password", start, tokens, ("id_token",))
        with self._lock:
            self._password = Secret(new_password)
            self._loaded = True
            self._keep(session)

    def enroll_totp(self) -> TotpEnrollment:
        """Begins enrolling a TOTP second factor (``POST /mfa/totp``): a new
        secret, pending until :meth:`verify_totp`. 409 ``mfa_enrolled``
        while one is active."""
        if self._client_id:
            raise ClientError("acme_platform: enroll_totp: a service client has no second factor")
        url = self._account_url + "/mfa/totp"
        return cast(TotpEnrollment, self._json(self._call_body("POST", url, None), "POST", url))

    def verify_totp(self, code: str) -> List[str]:
        """Activates the pending secret with a current code (``POST
        /mfa/totp/verify``) and returns the 10 recovery codes, shown only
        now. A wrong code raises :class:`ApiError` 403 ``invalid_otp``."""
        if self._client_id:
            raise ClientError("acme_platform: verify_totp: a service client has no second factor")
        url = self._account_url + "/mfa/totp/verify"
        doc = self._json(
            self._call_body("POST", url, Secret(json.dumps({"code": code}))), "POST", url
        )
        codes = doc.get("recoveryCodes") if isinstance(doc, dict) else None
        if not isinstance(codes, list):
            raise ClientError(
                "acme_platform: POST /mfa/totp/verify: the response holds no recovery codes"
            )
        return [str(c) for c in codes]

    def remove_totp(self, *, code: Optional[str] = None, password: Optional[str] = None) -> None:
        """Removes the user's second factor (``DELETE /mfa/totp``) with a
        code (current or recovery) or the password, exactly one. Wrong:
        403 ``invalid_otp`` or ``invalid_current_password``."""
        if self._client_id:
            raise ClientError("acme_platform: remove_totp: a service client has no second factor")
        if (code is None) == (password is None):
            raise ClientError("acme_platform: remove_totp: give code or password, exactly one")
        proof: Dict[str, str] = (
            {"code": code} if code is not None else {"password": password or ""}
        )
        self._call_body("DELETE", self._account_url + "/mfa/totp", Secret(json.dumps(proof)))

    def reset_user_mfa(self, user_id: str) -> None:
        """Removes a user's second factor (``DELETE /users/{id}/mfa``,
        ``users:write``); every session of the user ends."""
        self._call("DELETE", self._user_url(user_id) + "/mfa")

    def _call_body(self, method: str, url: str, body: Optional[Secret]) -> Response:
        """An authenticated request whose JSON body holds a secret (a
        password): renewed once on a 401 invalid_token like _call, never
        retried otherwise (a password is never sent twice by itself)."""
        renewed = False
        while True:
            bearer, generation = self._current_bearer()
            try:
                return self._exchange(
                    method,
                    url,
                    body=body,
                    content_type="application/json",
                    authorization=Secret("Bearer " + bearer.reveal()),
                )
            except ApiError as err:
                if err.status == 401 and err.code == CODE_INVALID_TOKEN and not renewed:
                    renewed = True
                    self._invalidate(generation)
                    continue
                raise

    # -- conversations --------------------------------------------------

    def conversation_pages(
        self,
        *,
        limit: Optional[int] = None,
        status: Optional[str] = None,
        updated_after: Optional[str] = None,
    ) -> Iterator[Page[Conversation]]:
        """The caller's conversations page by page (newest activity first),
        following each page's ``Link: rel="next"``; the next page is only
        requested when the loop asks for it. ``limit`` is the page size
        (1..100; the service's default 10 when None)."""
        url = _with_query(
            self._conversations("/v1/conversations"),
            {"limit": limit, "status": status, "updatedAfter": updated_after},
        )
        return cast(Iterator[Page[Conversation]], self._walk(url))

    def conversations(
        self,
        *,
        limit: Optional[int] = None,
        status: Optional[str] = None,
        updated_after: Optional[str] = None,
    ) -> Iterator[Conversation]:
        """Every conversation of the caller, newest activity first, across
        all pages (a generator; see :meth:`conversation_pages`)::

            for conversation in client.conversations(status="open"):
                print(conversation["subject"])
        """
        for page in self.conversation_pages(
            limit=limit, status=status, updated_after=updated_after
        ):
            yield from page.items

    def get_conversation(self, conversation_id: str) -> Conversation:
        """One conversation (``GET /v1/conversations/{id}``); ApiError with
        code ``not_found`` when the caller has none with this id."""
        url = self._conversation_url(conversation_id)
        resp = self._call("GET", url, retry=True)
        self._remember_etag(conversation_id, resp)
        return cast(Conversation, self._json(resp, "GET", url))

    def create_conversation(
        self,
        *,
        subject: Optional[str] = None,
        participants: Optional[List[str]] = None,
        status: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Conversation:
        """Creates a conversation (``POST /v1/conversations``). A user is
        always a participant; a service client names every participant.
        The request carries an ``Idempotency-Key`` (a new random one unless
        given), reused by the call's own retries, so that a retried
        creation creates one conversation."""
        payload: Dict[str, Any] = {}
        if subject is not None:
            payload["subject"] = subject
        if participants is not None:
            payload["participants"] = list(participants)
        if status is not None:
            payload["status"] = status
        url = self._conversations("/v1/conversations")
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
        resp = self._call(
            "POST", url, payload=payload, headers={"Idempotency-Key": key}, retry=True
        )
        conversation = cast(Conversation, self._json(resp, "POST", url))
        if isinstance(conversation, dict) and isinstance(conversation.get("id"), str):
            self._remember_etag(conversation["id"], resp)
        return conversation

    def update_conversation(
        self,
        conversation_id: str,
        *,
        subject: Optional[str] = None,
        status: Optional[str] = None,
        if_match: Optional[str] = None,
    ) -> Conversation:
        """Changes the subject and/or status (``PATCH``, a JSON merge patch).
        The request carries ``If-Match`` with ``if_match`` or, by default,
        the last ETag this client saw for the conversation, so that a
        change made by someone else in between is an ApiError 412
        ``precondition_failed`` rather than silently overwritten: read the
        conversation again and retry. Without a known ETag the change is
        unconditional. Not retried automatically."""
        patch: Dict[str, Any] = {}
        if subject is not None:
            patch["subject"] = subject
        if status is not None:
            patch["status"] = status
        if not patch:
            raise ValueError("update_conversation: nothing to change (give subject and/or status)")
        tag = if_match if if_match is not None else self.etag(conversation_id)
        url = self._conversation_url(conversation_id)
        resp = self._call(
            "PATCH",
            url,
            payload=patch,
            content_type="application/merge-patch+json",
            headers={"If-Match": tag} if tag else None,
        )
        self._remember_etag(conversation_id, resp)
        return cast(Conversation, self._json(resp, "PATCH", url))

    def _conversation_url(self, conversation_id: str) -> str:
        if not conversation_id:
            raise ValueError("empty conversation id")
        return self._conversations(
            "/v1/conversations/" + urllib.parse.quote(conversation_id, safe="")
        )

    # -- messages -------------------------------------------------------

    def post_message(
        self,
        conversation_id: str,
        body: str,
        *,
        metadata: Optional[Mapping[str, Any]] = None,
        idempotency_key: Optional[str] = None,
    ) -> Message:
        """Posts a message (``POST /v1/conversations/{id}/messages``); the
        author is the caller. Like :meth:`create_conversation`, it carries an
        ``Idempotency-Key`` that its retries reuse."""
        payload: Dict[str, Any] = {"body": body}
        if metadata is not None:
            payload["metadata"] = dict(metadata)
        url = self._conversation_url(conversation_id) + "/messages"
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
        resp = self._call(
            "POST", url, payload=payload, headers={"Idempotency-Key": key}, retry=True
        )
        message = cast(Message, self._json(resp, "POST", url))
        self._track_etag_after_message(conversation_id)
        return message

    def _track_etag_after_message(self, conversation_id: str) -> None:
        """A message changes its conversation, and so its ETag, which the
        message's answer does not carry. When the client holds a tag of the
        conversation, it reads the conversation again (one GET) and keeps
        the new tag, so that the next update is conditional on the state
        after the message. Should that read fail, the message stands and
        the old tag stays: the next update then gets a 412, never a silent
        overwrite."""
        if self.etag(conversation_id) is None:
            return
        try:
            self.get_conversation(conversation_id)
        except ClientError as err:
            logger.info("re-reading the conversation after a message failed: %s", err)

    def message_pages(
        self, conversation_id: str, *, limit: Optional[int] = None
    ) -> Iterator[Page[Message]]:
        """The messages of a conversation page by page, newest first,
        following ``Link: rel="next"``."""
        url = _with_query(self._conversation_url(conversation_id) + "/messages", {"limit": limit})
        return cast(Iterator[Page[Message]], self._walk(url))

    def messages(self, conversation_id: str, *, limit: Optional[int] = None) -> Iterator[Message]:
        """Every message of a conversation, newest first, across all pages
        (a generator)."""
        for page in self.message_pages(conversation_id, limit=limit):
            yield from page.items

    # Webhook endpoints: a service client with the scopes
    # webhooks:manage and conversations:read.

    def _webhook_url(self, webhook_id: str, suffix: str = "") -> str:
        if not webhook_id:
            raise ValueError("empty webhook endpoint id")
        return self._conversations(
            "/v1/webhooks/" + urllib.parse.quote(webhook_id, safe="") + suffix
        )

    def create_webhook(
        self,
        url: str,
        *,
        events: Optional[List[str]] = None,
        description: Optional[str] = None,
        enabled: Optional[bool] = None,
    ) -> Dict[str, Any]:
        """Creates an endpoint (``POST /v1/webhooks``). The answer alone
        carries its ``secret``: keep it to verify deliveries
        (verify_webhook). A 21st endpoint is an ApiError 409
        ``too_many_endpoints``."""
        payload: Dict[str, Any] = {"url": url}
        if events is not None:
            payload["events"] = list(events)
        if description is not None:
            payload["description"] = description
        if enabled is not None:
            payload["enabled"] = enabled
        target = self._conversations("/v1/webhooks")
        return cast(
            Dict[str, Any], self._json(self._call("POST", target, payload=payload), "POST", target)
        )

    def webhook_pages(self, *, limit: Optional[int] = None) -> Iterator[Page[Dict[str, Any]]]:
        """The account's endpoints page by page, newest first."""
        return self._walk(_with_query(self._conversations("/v1/webhooks"), {"limit": limit}))

    def webhooks(self, *, limit: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """Every endpoint of the account."""
        for page in self.webhook_pages(limit=limit):
            yield from page.items

    def get_webhook(self, webhook_id: str) -> Dict[str, Any]:
        """One endpoint (never its secret)."""
        url = self._webhook_url(webhook_id)
        return cast(Dict[str, Any], self._json(self._call("GET", url, retry=True), "GET", url))

    def update_webhook(self, webhook_id: str, **patch: Any) -> Dict[str, Any]:
        """Changes ``url``, ``events``, ``description`` and/or ``enabled``
        (a JSON merge patch); enabling clears ``disabledReason``."""
        unknown = set(patch) - {"url", "events", "description", "enabled"}
        if unknown or not patch:
            raise ValueError("update_webhook: give url, events, description and/or enabled")
        url = self._webhook_url(webhook_id)
        resp = self._call("PATCH", url, payload=patch, content_type="application/merge-patch+json")
        return cast(Dict[str, Any], self._json(resp, "PATCH", url))

    def delete_webhook(self, webhook_id: str) -> None:
        """Deletes an endpoint."""
        self._call("DELETE", self._webhook_url(webhook_id))

    def rotate_webhook_secret(
        self, webhook_id: str, *, overlap_seconds: Optional[int] = None
    ) -> str:
        """A new secret; the previous one keeps signing beside it for
        ``overlap_seconds`` (default: the service's, 24 h; 0 stops it)."""
        payload: Dict[str, Any] = {} if overlap_seconds is None else {"overlap": overlap_seconds}
        url = self._webhook_url(webhook_id, "/rotate-secret")
        return cast(
            str, self._json(self._call("POST", url, payload=payload), "POST", url)["secret"]
        )

    def test_webhook(self, webhook_id: str) -> Dict[str, Any]:
        """Sends a ``webhook.test`` event to this endpoint only; returns its
        delivery, pending."""
        url = self._webhook_url(webhook_id, "/test")
        return cast(Dict[str, Any], self._json(self._call("POST", url), "POST", url))

    def webhook_deliveries(
        self, webhook_id: str, *, limit: Optional[int] = None
    ) -> Iterator[Dict[str, Any]]:
        """Every delivery of the endpoint, newest first."""
        for page in self._walk(
            _with_query(self._webhook_url(webhook_id, "/deliveries"), {"limit": limit})
        ):
            yield from page.items

    def retry_webhook_delivery(self, webhook_id: str, delivery_id: str) -> None:
        """Delivers one delivery again now, with the same ``webhook-id``."""
        if not delivery_id:
            raise ValueError("empty delivery id")
        self._call(
            "POST",
            self._webhook_url(
                webhook_id, "/deliveries/" + urllib.parse.quote(delivery_id, safe="") + "/retry"
            ),
        )

    # -- events ---------------------------------------------------------

    def _events_url(
        self,
        path: str,
        after: Union[int, str, None],
        limit: Optional[int],
        types: Optional[Sequence[str]],
    ) -> str:
        # A lone type is a type, not a sequence of its characters.
        wanted = [types] if isinstance(types, str) else list(types) if types is not None else None
        query = events_query(after, limit, wanted)
        url = self._conversations(path)
        return url + ("?" + urllib.parse.urlencode(query) if query else "")

    def event_page(
        self,
        *,
        after: Optional[int] = None,
        limit: Optional[int] = None,
        types: Optional[Sequence[str]] = None,
        page_url: Optional[str] = None,
    ) -> EventPage:
        """One page of the event feed (``GET /v1/events``): the events
        after ``after``, or the page at ``page_url`` (a previous page's
        ``next_url``). ``EventPage.position`` is where to continue from."""
        check_position(after)
        if page_url is None:
            page = self._page(self._events_url("/v1/events", after, limit, types), None)
        else:
            page = self._page(page_url, page_url)
        return EventPage(
            items=cast(List[Event], page.items),
            next_url=page.next_url,
            position=position_of(page.next_url),
        )

    def events(
        self,
        *,
        after: Optional[int] = None,
        limit: Optional[int] = None,
        types: Optional[Sequence[str]] = None,
    ) -> EventFeed:
        """The event feed after ``after`` (a stored position; default: from
        the oldest kept), as an :class:`EventFeed`: a ``for`` over it reads
        page after page while they come full (more are ready), up to the
        newest event, and ``feed.position`` is where to
        resume from. ``limit`` is the page size (1..1000), ``types`` a
        filter (``EVENT_*``). An ApiError 410 ``cursor_expired`` says the
        position is older than the service keeps: resynchronise (e.g.
        ``conversations(updated_after=...)``)."""
        check_position(after)
        return EventFeed(
            after,
            limit if limit is not None else DEFAULT_EVENT_PAGE_SIZE,
            lambda position: self._events_url("/v1/events", position, limit, types),
            lambda url: self.event_page(page_url=url),
        )

    def stream_events(
        self,
        *,
        after: Optional[int] = None,
        types: Optional[Sequence[str]] = None,
    ) -> EventStream:
        """Follows the live stream of events (``GET /v1/events/stream``,
        Server-Sent Events): a ``for`` over the :class:`EventStream` blocks
        until each event arrives, for as long as the loop runs, reconnecting
        with a fresh token and ``Last-Event-ID`` when the connection ends or
        drops. ``stream.position`` is the last ``sequence`` received. An
        error answer (400, 410 ``cursor_expired``, 429 beyond 10 streams) is
        an :class:`ApiError`."""
        check_position(after)

        def open_stream(last_event_id: Optional[str]) -> http.client.HTTPResponse:
            url = self._events_url(
                "/v1/events/stream",
                last_event_id if last_event_id is not None else after,
                None,
                types,
            )
            headers = {"Accept": "text/event-stream"}
            if last_event_id is not None:
                headers["Last-Event-ID"] = last_event_id
            resp = self._call("GET", url, headers=headers, retry=True, stream=True)
            if resp.stream is None:
                raise ClientError("acme_platform: GET /v1/events/stream: no stream")
            return resp.stream

        return EventStream(open_stream, self._max_retries, self._max_retry_wait)
