"""Shared helpers of the suite, which runs against the real services.

The endpoints and credentials come from the environment that
deploy/clientstest sets (see its doc.go): ACME_TEST_ACCOUNT_URL,
ACME_TEST_CONVERSATIONS_URL, ACME_TEST_ACCOUNT_NAME, ACME_TEST_USERNAME, ...
A missing variable fails the test that needs it; nothing is skipped.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import threading
import unittest
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

from acme_platform import Client, TokenStore


def env(name: str) -> str:
    value = os.environ.get("ACME_TEST_" + name, "")
    if not value:
        raise AssertionError(
            f"ACME_TEST_{name} is not set: run this suite through deploy/clientstest "
            "(go test ./deploy/clientstest/...), which starts the services and sets it"
        )
    return value


def timestamp(value: str) -> datetime.datetime:
    """Parses an RFC 3339 UTC timestamp of the services (its fraction may
    have fewer than six digits)."""
    head, _, frac = value.rstrip("Z").partition(".")
    micros = int((frac + "000000")[:6])
    return datetime.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(
        microsecond=micros, tzinfo=datetime.timezone.utc
    )


def user_client(
    who: str = "",
    *,
    token_store: Optional[TokenStore] = None,
    conversations_url: Optional[str] = None,
    password: Optional[str] = None,
) -> Client:
    """A client logged in (lazily) as the suite's user, or as the user of
    the prefix who ("OTHER_", "LOCKOUT_")."""
    return Client(
        account_url=env("ACCOUNT_URL"),
        conversations_url=conversations_url or env("CONVERSATIONS_URL"),
        username=env(who + "USERNAME"),
        password=password if password is not None else env(who + "PASSWORD"),
        account_name=env("ACCOUNT_NAME"),
        token_store=token_store,
    )


def service_client() -> Client:
    """A client with the suite's service client credentials."""
    return Client(
        account_url=env("ACCOUNT_URL"),
        conversations_url=env("CONVERSATIONS_URL"),
        client_id=env("CLIENT_ID"),
        client_secret=env("CLIENT_SECRET"),
    )


def raw_post(url: str, body: Dict[str, Any]) -> Tuple[int, bytes]:
    """A plain JSON POST, outside the library: the tests use it to get
    and revoke token sets behind the library's back."""
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        # No timeout of its own: a loaded machine may take any time; the
        # suite runner's deadline bounds a hang.
        with urllib.request.urlopen(req) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read()


def raw_login() -> Dict[str, Any]:
    """A token set of the suite's user, by a plain POST /login."""
    status, body = raw_post(
        env("ACCOUNT_URL") + "/login",
        {
            "username": env("USERNAME"),
            "password": env("PASSWORD"),
            "accountName": env("ACCOUNT_NAME"),
        },
    )
    if status != 200:
        raise AssertionError(f"POST /login: {status} {body[:200]!r}")
    tokens: Dict[str, Any] = json.loads(body)["tokens"]
    return tokens


class LogCapture(logging.Handler):
    """Collects the records of the library's logger (level DEBUG)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []
        self._lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock2:
            self.records.append(record)

    def messages(self) -> List[str]:
        with self._lock2:
            return [r.getMessage() for r in self.records]

    def count(self, text: str) -> int:
        return sum(1 for m in self.messages() if text in m)


class LoggedTestCase(unittest.TestCase):
    """A test case that captures the library's log lines, and checks after
    every test that none of them holds a secret of the suite."""

    def setUp(self) -> None:
        self.log = LogCapture()
        logger = logging.getLogger("acme_platform")
        self._old_level = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self.log)
        self.extra_secrets: List[str] = []

        def check() -> None:
            logger.removeHandler(self.log)
            logger.setLevel(self._old_level)
            secrets = [
                os.environ.get("ACME_TEST_" + n, "")
                for n in ("PASSWORD", "OTHER_PASSWORD", "LOCKOUT_PASSWORD", "CLIENT_SECRET")
            ]
            for line in self.log.messages():
                for secret in secrets + self.extra_secrets:
                    if secret and secret in line:
                        self.fail(f"a secret appears in the log line {line!r}")

        self.addCleanup(check)


class DropFirstResponses:
    """A proxy in front of the real service at ``upstream`` that forwards
    every request and, for the first ``drop`` requests matching ``method``
    and ``path_prefix``, closes the connection instead of returning the
    service's answer, as a network failure after the request has been
    processed would. It fakes nothing of the API: every answer that reaches
    the client is the service's own. The proxy is deploy/clientstest's
    fault proxy, shared by the client suites; this opens one through its
    control endpoint (ACME_TEST_FAULT_PROXY_URL)."""

    def __init__(
        self,
        upstream: str,
        method: str,
        path_prefix: str,
        drop: int,
        cut_after_events: int = 0,
        refuse_tokens: int = 0,
        refuse_from: int = 0,
    ) -> None:
        """With ``cut_after_events``, the matching answers are streamed and
        the first ``drop`` of them cut after that many events instead. With
        ``refuse_tokens``, that many matching requests from the one numbered
        ``refuse_from`` (0: the first) reach the service with their bearer
        token broken: the service answers 401 ``invalid_token``."""
        self._control = env("FAULT_PROXY_URL")
        status, body = raw_post(
            self._control + "/proxies",
            {
                "upstream": upstream,
                "method": method,
                "pathPrefix": path_prefix,
                "drop": drop,
                "cutAfterEvents": cut_after_events,
                "refuseTokens": refuse_tokens,
                "refuseFrom": refuse_from,
            },
        )
        if status != 201:
            raise AssertionError(f"POST /proxies: {status} {body[:200]!r}")
        opened: Dict[str, str] = json.loads(body)
        self._id = opened["id"]
        self.url = opened["url"]

    def _report(self) -> Dict[str, Any]:
        with urllib.request.urlopen(self._control + "/proxies/" + self._id) as resp:
            report: Dict[str, Any] = json.loads(resp.read())
            return report

    @property
    def dropped(self) -> int:
        """How many answers the proxy has dropped so far."""
        return int(self._report()["dropped"])

    @property
    def forwarded(self) -> List[Tuple[str, str, Dict[str, str]]]:
        """Method, target and headers of every request passed on so far."""
        return [(f["method"], f["target"], f["headers"]) for f in self._report()["forwarded"]]

    @property
    def tokens_refused(self) -> List[bool]:
        """For every request passed on so far, whether its token was broken."""
        return [bool(f["tokenRefused"]) for f in self._report()["forwarded"]]

    def close(self) -> None:
        req = urllib.request.Request(self._control + "/proxies/" + self._id, method="DELETE")
        with urllib.request.urlopen(req):
            pass
