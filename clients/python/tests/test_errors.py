"""The mapping of the services' errors onto ApiError."""

from __future__ import annotations

import json
import re
import time
import unittest
import uuid
from pathlib import Path

import acme_platform
from acme_platform import (
    CODE_INVALID_CREDENTIALS,
    CODE_NOT_FOUND,
    CODE_TOO_MANY_REQUESTS,
    CODE_VALIDATION_FAILED,
    ApiError,
    Client,
)
from support import LoggedTestCase, env, raw_post, user_client


class ErrorMappingTest(LoggedTestCase):
    def test_400_carries_the_field_errors(self) -> None:
        client = user_client()
        with self.assertRaises(ApiError) as caught:
            client.create_conversation(subject="x" * 301, participants=[env("OTHER_USER_ID"), ""])
        err = caught.exception
        self.assertEqual((err.status, err.code), (400, CODE_VALIDATION_FAILED))
        self.assertEqual({f.field for f in err.field_errors}, {"subject", "participants[1]"})
        self.assertTrue(all(f.reason for f in err.field_errors))
        self.assertIn("participants[1]", str(err))
        self.assertIsNone(err.retry_after)

    def test_400_of_a_query_parameter(self) -> None:
        with self.assertRaises(ApiError) as caught:
            next(iter(user_client().conversations(limit=0)))
        self.assertEqual(
            (caught.exception.status, caught.exception.code), (400, CODE_VALIDATION_FAILED)
        )
        self.assertEqual([f.field for f in caught.exception.field_errors], ["limit"])

    def test_401_wrong_credentials(self) -> None:
        wrong = "not-" + env("OTHER_PASSWORD")
        with self.assertRaises(ApiError) as caught:
            user_client("OTHER_", password=wrong).list_definitions()
        err = caught.exception
        self.assertEqual((err.status, err.code), (401, CODE_INVALID_CREDENTIALS))
        self.assertTrue(err.request_id)
        self.assertNotIn(wrong, str(err) + repr(err))

    def test_404_unknown_and_foreign_conversations(self) -> None:
        client = user_client()
        with self.assertRaises(ApiError) as caught:
            client.get_conversation("cnv_does_not_exist")
        self.assertEqual((caught.exception.status, caught.exception.code), (404, CODE_NOT_FOUND))
        self.assertEqual(caught.exception.path, "/v1/conversations/cnv_does_not_exist")

        # A conversation of the account in which the caller takes no part
        # does not exist for them.
        theirs = user_client("OTHER_").create_conversation(subject="not yours")
        with self.assertRaises(ApiError) as caught:
            client.get_conversation(theirs["id"])
        self.assertEqual(caught.exception.status, 404)

    def test_429_carries_retry_after(self) -> None:
        statuses = []
        err = None
        for _ in range(10):
            wrong = f"wrong-{time.monotonic_ns()}"
            try:
                user_client("LOCKOUT_", password=wrong).login()
            except ApiError as caught:
                statuses.append(caught.status)
                if caught.status == 429:
                    err = caught
                    break
        self.assertIsNotNone(err, f"no 429 after {statuses}")
        assert err is not None
        self.assertEqual(statuses[:-1], [401] * (len(statuses) - 1))
        self.assertEqual(err.code, CODE_TOO_MANY_REQUESTS)
        self.assertIsNotNone(err.retry_after)
        self.assertGreater(err.retry_after or 0, 0)
        self.assertIn("retry after", str(err))
        # The lock holds for the right password too, and the client does not
        # wait minutes on its own: it raises at once.
        with self.assertRaises(ApiError) as still:
            user_client("LOCKOUT_").login()
        self.assertEqual(still.exception.status, 429)


class MessagesAreTheServicesTest(LoggedTestCase):
    """The client never redacts by replacing text (which mangled "The
    account name, username or password is wrong." into "... is [redacted]."
    for the password "wrong", or every "e" for the password "e"): it keeps
    secrets out of its errors by never putting them there."""

    def test_one_letter_and_common_word_passwords(self) -> None:
        login = env("ACCOUNT_URL") + "/login"
        # Users that do not exist: every failed login gets the same answer,
        # and none of them is a user the suite needs.
        status, body = raw_post(
            login,
            {
                "username": f"nobody-{uuid.uuid4().hex}",
                "password": "x",
                "accountName": env("ACCOUNT_NAME"),
            },
        )
        self.assertEqual(status, 401)
        detail = json.loads(body)["detail"]
        unusual = f"Zq-{uuid.uuid4().hex}"
        for password in ("e", "is", "wrong", "password", unusual):
            client = Client(
                account_url=env("ACCOUNT_URL"),
                username=f"nobody-{uuid.uuid4().hex}",
                password=password,
                account_name=env("ACCOUNT_NAME"),
            )
            with self.assertRaises(ApiError) as caught:
                client.login()
            err = caught.exception
            self.assertEqual((err.status, err.code), (401, CODE_INVALID_CREDENTIALS))
            self.assertEqual(err.detail, detail, f"password {password!r}")
            self.assertEqual(
                str(err),
                f"acme_platform: POST /login: 401 invalid_credentials: {detail} "
                f"[request id {err.request_id}]",
            )
            self.assertNotIn("[redacted]", str(err) + repr(err))
        self.assertNotIn(unusual, str(err) + repr(err) + repr(vars(err)))


class CodeConstantsTest(unittest.TestCase):
    def test_a_constant_for_every_code_of_docs_errors_md(self) -> None:
        doc = Path(__file__).resolve().parents[3] / "docs" / "errors.md"
        codes = set(re.findall(r"^\| *\d{3} *\| *`([a-z_]+)`", doc.read_text(), re.M))
        self.assertGreater(len(codes), 5, "docs/errors.md lists the codes in a table")
        for code in sorted(codes):
            name = "CODE_" + code.upper()
            self.assertEqual(getattr(acme_platform, name, None), code, name)
            self.assertIn(name, acme_platform.__all__)
