"""One HTTP exchange over the standard library's urllib."""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Union

from ._errors import TransportError
from ._secret import Secret

#: The largest response body read; a larger successful body is an error.
MAX_BODY_BYTES = 4 << 20


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    #: Header fields by lower-case name; repeated fields joined by ", "
    #: (except Link, see ``links``).
    headers: Dict[str, str]
    #: Every Link header field value, in order.
    links: List[str]
    body: bytes
    #: The answer still being received, for a 2xx answer to a request
    #: sent with ``stream=True`` (``body`` is then empty): read it, then
    #: close it.
    stream: Optional[http.client.HTTPResponse] = None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are answers, never followed: following one would send the
    bearer token (or a password) to wherever the Location points."""

    def redirect_request(  # type: ignore[no-untyped-def]
        self, req, fp, code, msg, headers, newurl
    ):
        return None


class Transport:
    """Sends requests with urllib, following no redirect."""

    def __init__(self, timeout: float, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self._timeout = timeout
        handlers: List[urllib.request.BaseHandler] = [_NoRedirect()]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: Union[bytes, Secret, None],
        authorization: Optional[Secret] = None,
        *,
        stream: bool = False,
        timeout: Optional[float] = None,
    ) -> Response:
        """Sends one request. A secret body or Authorization value is only
        revealed into the request object, never into a local variable, so
        that a traceback captured with its locals does not show it. With
        ``stream``, a 2xx answer is returned unread, as ``Response.stream``;
        ``timeout`` then bounds each read instead of the default."""
        path = urllib.parse.urlsplit(url).path or "/"
        req = urllib.request.Request(
            url,
            data=body.reveal().encode() if isinstance(body, Secret) else body,
            headers=dict(headers),
            method=method,
        )
        if authorization is not None:
            req.add_header("Authorization", authorization.reveal())
        try:
            try:
                resp = self._opener.open(req, timeout=timeout or self._timeout)
            except urllib.error.HTTPError as err:
                resp = err  # an answer outside 2xx (or a redirect) is still an answer
            if stream and 200 <= int(resp.getcode()) < 300:
                return Response(
                    int(resp.getcode()),
                    resp.reason if isinstance(resp.reason, str) else "",
                    {name.lower(): value for name, value in resp.headers.items()},
                    list(resp.headers.get_all("Link") or []),
                    b"",
                    resp,
                )
            with resp:
                data = resp.read(MAX_BODY_BYTES + 1)
                status = int(resp.getcode())
                reason = resp.reason if isinstance(resp.reason, str) else ""
                raw = resp.headers
        except urllib.error.URLError as err:
            raise TransportError(method, path, _describe(err.reason)) from None
        except (OSError, http.client.HTTPException) as err:
            raise TransportError(method, path, _describe(err)) from None
        if len(data) > MAX_BODY_BYTES and 200 <= status < 300:
            raise TransportError(method, path, f"response body exceeds {MAX_BODY_BYTES} bytes")
        out: Dict[str, str] = {}
        for name in raw.keys():
            key = name.lower()
            if key not in out:
                out[key] = ", ".join(raw.get_all(name) or [])
        return Response(
            status, reason, out, list(raw.get_all("Link") or []), data[:MAX_BODY_BYTES]
        )


def _describe(reason: object) -> str:
    """A cause without the URL (which could carry user info)."""
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, http.client.RemoteDisconnected):
        return "connection closed without a response"
    if isinstance(reason, ConnectionResetError):
        return "connection reset"
    if isinstance(reason, BaseException):
        return type(reason).__name__ + (f": {reason}" if str(reason) else "")
    return str(reason)
