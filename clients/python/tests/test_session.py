"""Logging in, client credentials, renewal and the secrecy of secrets."""

from __future__ import annotations

import pickle
import threading
import time
import traceback
from typing import Any, Dict, List

from acme_platform import (
    CODE_INVALID_CREDENTIALS,
    ApiError,
    Client,
    MemoryTokenStore,
    Secret,
    Session,
)
from support import LoggedTestCase, env, raw_login, raw_post, service_client, user_client


def with_locals(err: BaseException) -> str:
    """The traceback of err with the local variables of every frame, as
    error trackers capture it."""
    return "".join(traceback.TracebackException.from_exception(err, capture_locals=True).format())


def expired_session(tokens: Dict[str, Any]) -> Session:
    """A session made of a real token set, which the client must renew at
    once."""
    return Session(
        bearer=Secret(tokens["id_token"]),
        refresh_token=Secret(tokens["refresh_token"]),
        expires_at=time.time() - 1,
        lifetime=float(tokens["expires_in"]),
    )


class PasswordLoginTest(LoggedTestCase):
    def test_login_then_calls_use_the_session(self) -> None:
        client = user_client()
        client.login()
        self.assertEqual(self.log.count("logged in"), 1)
        definitions = client.list_definitions()
        self.assertEqual([d["name"] for d in definitions], [env("DEFINITION_NAME")])
        self.assertEqual(self.log.count("logged in"), 1, "a fresh session is used, not renewed")

    def test_first_call_logs_in_by_itself(self) -> None:
        client = user_client()
        self.assertIsInstance(client.list_definitions(), list)
        self.assertEqual(self.log.count("logged in"), 1)

    def test_wrong_password_is_invalid_credentials_without_the_password(self) -> None:
        wrong = "Wr0ng-" + env("PASSWORD")[::-1]
        client = user_client("OTHER_", password=wrong)
        with self.assertRaises(ApiError) as caught:
            client.login()
        err = caught.exception
        self.assertEqual((err.status, err.code), (401, CODE_INVALID_CREDENTIALS))
        self.assertEqual((err.method, err.path), ("POST", "/login"))
        for text in (str(err), repr(err), repr(client), str(err.args), with_locals(err)):
            self.assertNotIn(wrong, text)
        # The right password still works: one failure locks nothing.
        user_client("OTHER_").login()


class ClientCredentialsTest(LoggedTestCase):
    def test_service_client_reads_definitions(self) -> None:
        client = service_client()
        client.login()
        self.assertEqual(self.log.count("obtained an access token with client credentials"), 1)
        self.assertEqual([d["type"] for d in client.list_definitions()], [env("DEFINITION_TYPE")])

    def test_service_client_writes_conversations_it_takes_no_part_in(self) -> None:
        client = service_client()
        created = client.create_conversation(
            subject="from a backend", participants=[env("USER_ID")]
        )
        self.assertEqual(created["participants"], [env("USER_ID")])
        # The user sees it; the service client sees every conversation of the account.
        self.assertEqual(
            user_client().get_conversation(created["id"])["subject"], "from a backend"
        )
        self.assertIn(created["id"], [c["id"] for c in client.conversations(limit=100)])
        message = client.post_message(created["id"], "hello from a backend")
        self.assertEqual(message["author"], env("CLIENT_ID"))

    def test_wrong_client_secret_is_refused_without_the_secret(self) -> None:
        wrong = "cs_" + "0" * 43
        client = Client(
            account_url=env("ACCOUNT_URL"), client_id=env("CLIENT_ID"), client_secret=wrong
        )
        with self.assertRaises(ApiError) as caught:
            client.login()
        err = caught.exception
        self.assertEqual((err.status, err.code), (401, "invalid_client"))
        for text in (str(err), repr(err), repr(client), with_locals(err)):
            self.assertNotIn(wrong, text)
            self.assertNotIn(env("CLIENT_SECRET"), text)

    def test_service_client_renews_its_token(self) -> None:
        client = service_client()
        client.list_definitions()
        time.sleep(float(env("TOKEN_TTL")))  # the access token is now past its renewal time
        client.list_definitions()
        self.assertEqual(self.log.count("obtained an access token with client credentials"), 2)


class RenewalTest(LoggedTestCase):
    def test_renews_by_refresh_before_expiry(self) -> None:
        store = MemoryTokenStore()
        client = user_client(token_store=store)
        client.list_definitions()
        first = store.load()
        assert first is not None
        self.assertEqual(first.lifetime, float(env("TOKEN_TTL")))
        time.sleep(max(0.0, first.renew_at() - time.time() + 0.1))
        client.list_definitions()
        second = store.load()
        assert second is not None
        self.assertEqual(self.log.count("session renewed by refresh"), 1)
        self.assertEqual(
            self.log.count("logged in"), 1, "renewal refreshes, it does not log in again"
        )
        self.assertNotEqual(first.bearer.reveal(), second.bearer.reveal())
        self.assertGreater(second.expires_at, first.expires_at)
        self.extra_secrets += [first.bearer.reveal(), second.bearer.reveal()]

    def test_logs_in_again_when_refresh_is_refused(self) -> None:
        tokens = raw_login()
        status, _ = raw_post(
            env("ACCOUNT_URL") + "/logout", {"refresh_token": tokens["refresh_token"]}
        )
        self.assertEqual(status, 204)
        store = MemoryTokenStore(expired_session(tokens))
        client = user_client(token_store=store)
        self.assertEqual([d["name"] for d in client.list_definitions()], [env("DEFINITION_NAME")])
        self.assertEqual(
            self.log.count("refresh refused (401 invalid_token); logging in again"), 1
        )
        self.assertEqual(self.log.count("logged in"), 1)
        renewed = store.load()
        assert renewed is not None and renewed.refresh_token is not None
        self.assertNotEqual(renewed.refresh_token.reveal(), tokens["refresh_token"])
        self.extra_secrets += [tokens["id_token"], tokens["refresh_token"]]

    def test_a_refused_bearer_renews_the_session_and_the_call_goes_through(self) -> None:
        # The service refuses a bearer the client still believes valid (as
        # after a key rotation): 401 invalid_token, then one renewal and one
        # more attempt.
        tokens = raw_login()
        unusable = Session(
            bearer=Secret("not-a-token"),
            refresh_token=Secret(tokens["refresh_token"]),
            expires_at=time.time() + 3600,
            lifetime=3600.0,
        )
        client = user_client(token_store=MemoryTokenStore(unusable))
        self.assertEqual([d["name"] for d in client.list_definitions()], [env("DEFINITION_NAME")])
        self.assertEqual(self.log.count("session renewed by refresh"), 1)
        self.extra_secrets += [tokens["id_token"], tokens["refresh_token"]]

    def test_one_renewal_at_a_time(self) -> None:
        tokens = raw_login()
        client = user_client(token_store=MemoryTokenStore(expired_session(tokens)))
        threads: List[threading.Thread] = []
        errors: List[BaseException] = []
        start = threading.Barrier(8)

        def call() -> None:
            try:
                start.wait()
                client.list_definitions()
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(err)

        for _ in range(8):
            threads.append(threading.Thread(target=call))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(self.log.count("session renewed by refresh"), 1)
        self.assertEqual(self.log.count("logged in"), 0)

    def test_logout_revokes_the_session(self) -> None:
        store = MemoryTokenStore()
        client = user_client(token_store=store)
        client.login()
        session = store.load()
        assert session is not None and session.refresh_token is not None
        refresh = session.refresh_token.reveal()
        client.logout()
        self.assertIsNone(store.load())
        status, _ = raw_post(env("ACCOUNT_URL") + "/token/refresh", {"refresh_token": refresh})
        self.assertEqual(status, 401, "the refresh token of a logged-out session is refused")
        client.list_definitions()
        self.assertEqual(self.log.count("logged in"), 2)


class SecretsTest(LoggedTestCase):
    def test_no_string_form_shows_a_secret(self) -> None:
        store = MemoryTokenStore()
        users = user_client(token_store=store)
        users.login()
        session = store.load()
        assert session is not None and session.refresh_token is not None
        services = service_client()
        secrets: List[str] = [
            env("PASSWORD"),
            env("CLIENT_SECRET"),
            session.bearer.reveal(),
            session.refresh_token.reveal(),
        ]
        forms = [
            repr(users),
            str(users),
            repr(services),
            repr(store),
            repr(session),
            str(session),
            repr(vars(users)),
            repr(vars(services)),
            f"{session.bearer}",
        ]
        for form in forms:
            for secret in secrets:
                self.assertNotIn(secret, form)
        for thing in (users, services, session):
            with self.assertRaises(TypeError):
                pickle.dumps(thing)

    def test_no_traceback_local_shows_a_secret(self) -> None:
        store = MemoryTokenStore()
        client = user_client(token_store=store)
        with self.assertRaises(ApiError) as caught:
            client.get_conversation("cnv_none")
        session = store.load()
        assert session is not None and session.refresh_token is not None
        text = with_locals(caught.exception)
        self.assertIn("cnv_none", text, "the locals are there")
        for secret in (env("PASSWORD"), session.bearer.reveal(), session.refresh_token.reveal()):
            self.assertNotIn(secret, text)
