"""Users by API and self-service against the real services: a
backend (the suite's service client, users:read and users:write) signs a
user up, the user logs in with the library, reads its userinfo and changes
its password (the old refresh token stops working), then the backend
disables it (its login fails) and erases it."""

from __future__ import annotations

import json
import secrets
import unittest
import urllib.error
import urllib.request

from acme_platform import (
    CODE_INSUFFICIENT_SCOPE,
    CODE_INVALID_CREDENTIALS,
    CODE_INVALID_CURRENT_PASSWORD,
    CODE_NOT_FOUND,
    CODE_USERNAME_TAKEN,
    CODE_WEAK_PASSWORD,
    ApiError,
    Client,
    MemoryTokenStore,
)

from support import env, service_client, user_client


def new_password() -> str:
    return "pw-" + secrets.token_hex(16)


def user(username: str, password: str, store: MemoryTokenStore | None = None) -> Client:
    return Client(
        account_url=env("ACCOUNT_URL"),
        username=username,
        password=password,
        account_name=env("ACCOUNT_NAME"),
        token_store=store,
    )


class UsersTest(unittest.TestCase):
    def test_a_backend_manages_a_user_who_serves_itself(self) -> None:
        admin = service_client()
        first, second = new_password(), new_password()

        with self.assertRaises(ApiError) as weak:
            admin.create_user(username="py-signup", password="too-short")
        self.assertEqual((weak.exception.status, weak.exception.code), (400, CODE_WEAK_PASSWORD))
        self.assertEqual(weak.exception.field_errors[0].field, "password")

        created = admin.create_user(
            username="Py-Signup", password=first, name="Sign Up", email="signup@example.com"
        )
        self.assertEqual(created["username"], "py-signup")
        self.assertEqual(created["name"], "Sign Up")
        self.assertIsNone(created["lastLoginAt"])
        with self.assertRaises(ApiError) as taken:
            admin.create_user(username="py-signup", password=second)
        self.assertEqual(
            (taken.exception.status, taken.exception.code), (409, CODE_USERNAME_TAKEN)
        )
        self.assertEqual(admin.get_user(created["id"])["email"], "signup@example.com")
        pages = list(admin.user_pages(username="PY-SIGNUP"))
        self.assertEqual([[u["id"] for u in p.items] for p in pages], [[created["id"]]])
        names = [u["username"] for u in admin.users(limit=1)]
        self.assertIn("py-signup", names)
        self.assertIn(env("USERNAME"), names)

        # The user logs in with the library and asks who it is.
        store = MemoryTokenStore()
        me = user("py-signup", first, store)
        info = me.user_info()
        self.assertEqual(info["sub"], created["id"])
        self.assertEqual(info["preferred_username"], "py-signup")
        self.assertEqual(info["name"], "Sign Up")
        self.assertEqual(info["email"], "signup@example.com")
        self.assertIs(info["email_verified"], False)
        self.assertEqual(info["account_name"], env("ACCOUNT_NAME"))
        session = store.load()
        assert session is not None and session.refresh_token is not None
        old_refresh = session.refresh_token.reveal()

        with self.assertRaises(ApiError) as wrong:
            me.change_password("not-the-current-one", second)
        self.assertEqual(
            (wrong.exception.status, wrong.exception.code), (403, CODE_INVALID_CURRENT_PASSWORD)
        )
        me.change_password(first, second)
        # The client goes on with the new session; the old refresh token is dead.
        self.assertEqual(me.user_info()["sub"], created["id"])
        request = urllib.request.Request(
            env("ACCOUNT_URL") + "/token/refresh",
            data=json.dumps({"refresh_token": old_refresh}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        self.assertEqual(refused.exception.code, 401)
        refused.exception.close()
        self.assertIsNotNone(admin.get_user(created["id"])["lastLoginAt"])

        # The backend disables the user: its login fails.
        self.assertTrue(admin.update_user(created["id"], disabled=True)["disabled"])
        with self.assertRaises(ApiError) as disabled:
            user("py-signup", second).login()
        self.assertEqual(disabled.exception.code, CODE_INVALID_CREDENTIALS)

        self.assertIsNone(admin.update_user(created["id"], name=None)["name"])
        with self.assertRaises(ApiError) as weak_set:
            admin.set_user_password(created["id"], "password")
        self.assertEqual(weak_set.exception.code, CODE_WEAK_PASSWORD)
        admin.set_user_password(created["id"], new_password())
        admin.delete_user(created["id"])
        with self.assertRaises(ApiError) as gone:
            admin.get_user(created["id"])
        self.assertEqual((gone.exception.status, gone.exception.code), (404, CODE_NOT_FOUND))

        # A user's own token reaches no management call.
        with self.assertRaises(ApiError) as scope:
            list(user_client().users())
        self.assertEqual(
            (scope.exception.status, scope.exception.code), (403, CODE_INSUFFICIENT_SCOPE)
        )


if __name__ == "__main__":
    unittest.main()
