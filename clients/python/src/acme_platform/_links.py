"""Parsing of the Link header (RFC 8288) and resolution of next links."""

from __future__ import annotations

import urllib.parse
from typing import Dict, Iterable, List, Optional, Tuple

_TCHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class LinkHeaderError(ValueError):
    """A Link header that does not follow RFC 8288."""


def parse_links(value: str) -> List[Tuple[str, Dict[str, str]]]:
    """Parses one Link header value into (target, params) pairs; params
    are keyed by lower-case name and keep their first occurrence. Commas
    and semicolons inside ``<...>`` or a quoted string separate nothing.
    """
    links: List[Tuple[str, Dict[str, str]]] = []
    i, n = 0, len(value)

    def skip_ows() -> None:
        nonlocal i
        while i < n and value[i] in " \t":
            i += 1

    def token() -> str:
        nonlocal i
        start = i
        while i < n and value[i] in _TCHARS:
            i += 1
        return value[start:i]

    def fail(what: str) -> LinkHeaderError:
        return LinkHeaderError(f"malformed Link header: {what} at offset {i}")

    while True:
        while i < n and value[i] in " \t,":
            i += 1
        if i == n:
            return links
        if value[i] != "<":
            raise fail('want "<"')
        end = value.find(">", i + 1)
        if end < 0:
            raise fail('no ">" after "<"')
        target = value[i + 1 : end].strip()
        params: Dict[str, str] = {}
        i = end + 1
        while True:
            skip_ows()
            if i == n or value[i] == ",":
                break
            if value[i] != ";":
                raise fail('want ";" or ","')
            i += 1
            skip_ows()
            name = token().lower()
            if not name:
                raise fail("want a parameter name")
            skip_ows()
            param = ""
            if i < n and value[i] == "=":
                i += 1
                skip_ows()
                if i < n and value[i] == '"':
                    chars: List[str] = []
                    i += 1
                    while True:
                        if i == n:
                            raise fail("unterminated quoted string")
                        c = value[i]
                        if c == '"':
                            i += 1
                            break
                        if c == "\\":
                            i += 1
                            if i == n:
                                raise fail("unterminated quoted string")
                            c = value[i]
                        chars.append(c)
                        i += 1
                    param = "".join(chars)
                else:
                    param = token()
                    if not param:
                        raise fail("want a parameter value")
            params.setdefault(name, param)
        links.append((target, params))


def next_link(values: Iterable[str]) -> Optional[str]:
    """The target of the first link with relation type ``next`` among the
    Link header values, None when there is none. Links with an ``anchor``
    are about another resource and are skipped."""
    for value in values:
        for target, params in parse_links(value):
            if params.get("anchor"):
                continue
            if any(rel.lower() == "next" for rel in params.get("rel", "").split()):
                return target
    return None


def resolve_link(base: str, current: str, target: str) -> str:
    """Resolves the target of a next link received in answer to the request
    for ``current``. A target with an absolute path (the service's
    ``/v1/...``) is relative to the service root ``base``, which may carry a
    path prefix (a gateway); a relative reference is resolved against
    ``current``; an absolute URL must have the origin of ``base``, since
    the bearer token is sent to it."""
    ref = urllib.parse.urlsplit(target)
    if ref.scheme or ref.netloc:
        url = urllib.parse.urljoin(current, target)
        got, want = urllib.parse.urlsplit(url), urllib.parse.urlsplit(base)
        if (got.scheme.lower(), got.netloc.lower()) != (want.scheme.lower(), want.netloc.lower()):
            raise LinkHeaderError(
                f"refusing to follow a next link to another origin ({got.scheme}://{got.netloc})"
            )
    elif ref.path.startswith("/"):
        url = base + ref.path + ("?" + ref.query if ref.query else "")
    else:
        url = urllib.parse.urljoin(current, target)
    return urllib.parse.urldefrag(url)[0]
