"""A second factor against the real services: a user enrols a TOTP (codes
computed here with hmac, an implementation of RFC 6238 of its own), a login
without a code raises MfaRequiredError, one with a code or a recovery code
succeeds, a code is not accepted twice, and a backend's reset lets the
user sign in with the password alone."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
import time
import unittest

from acme_platform import (
    CODE_INVALID_CREDENTIALS,
    CODE_INVALID_CURRENT_PASSWORD,
    CODE_INVALID_OTP,
    CODE_MFA_REQUIRED,
    ApiError,
    Client,
    MfaRequiredError,
)

from support import env, service_client


def totp(secret: str, steps: int = 0) -> str:
    """The code of secret (base32) ``steps`` 30-second steps from now."""
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    counter = struct.pack(">Q", int(time.time()) // 30 + steps)
    mac = hmac.new(key, counter, hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    value = struct.unpack(">I", mac[offset : offset + 4])[0] & 0x7FFFFFFF
    return f"{value % 1_000_000:06d}"


def user(username: str, password: str) -> Client:
    return Client(
        account_url=env("ACCOUNT_URL"),
        username=username,
        password=password,
        account_name=env("ACCOUNT_NAME"),
    )


class SecondFactorTest(unittest.TestCase):
    def test_a_user_enrols_a_second_factor_and_signs_in_with_it(self) -> None:
        admin = service_client()
        password = "pw-" + secrets.token_hex(16)
        created = admin.create_user(username="py-mfa", password=password)
        me = user("py-mfa", password)

        enrolment = me.enroll_totp()
        self.assertTrue(enrolment["otpauthUri"].startswith("otpauth://totp/"))
        self.assertIn("secret=" + enrolment["secret"], enrolment["otpauthUri"])
        with self.assertRaises(ApiError) as wrong:
            me.verify_totp("000000x")
        self.assertEqual(wrong.exception.code, CODE_INVALID_OTP)
        # The activation uses the current step and the login the next:
        # neither is two steps old if the clock crosses a step meanwhile.
        recovery = me.verify_totp(totp(enrolment["secret"], 0))
        self.assertEqual(len(recovery), 10)
        self.assertEqual(me.user_info()["mfa"], ["totp"])
        self.assertEqual(admin.get_user(created["id"])["mfa"], ["totp"])

        again = user("py-mfa", password)
        with self.assertRaises(MfaRequiredError) as required:
            again.login()
        self.assertEqual(
            (required.exception.status, required.exception.code), (401, CODE_MFA_REQUIRED)
        )
        code = totp(enrolment["secret"], 1)
        again.login_with_otp(code)
        self.assertEqual(again.user_info()["sub"], created["id"])

        third = user("py-mfa", password)
        with self.assertRaises(ApiError) as replay:
            third.login_with_otp(code)
        self.assertEqual(replay.exception.code, CODE_INVALID_CREDENTIALS)
        third.login_with_otp(recovery[0])
        with self.assertRaises(ApiError) as spent:
            user("py-mfa", password).login_with_otp(recovery[0])
        self.assertEqual(spent.exception.code, CODE_INVALID_CREDENTIALS)
        with self.assertRaises(MfaRequiredError) as change:
            third.change_password(password, "pw-" + secrets.token_hex(16))
        self.assertEqual(change.exception.status, 403)
        with self.assertRaises(ApiError) as wrong_password:
            third.remove_totp(password="not-the-password")
        self.assertEqual(wrong_password.exception.code, CODE_INVALID_CURRENT_PASSWORD)

        admin.reset_user_mfa(created["id"])
        fresh = user("py-mfa", password)
        fresh.login()
        self.assertEqual(fresh.user_info()["mfa"], [])
        second = fresh.enroll_totp()
        fresh.verify_totp(totp(second["secret"], 0))
        fresh.remove_totp(code=totp(second["secret"], 1))
        self.assertEqual(fresh.user_info()["mfa"], [])
        admin.delete_user(created["id"])


if __name__ == "__main__":
    unittest.main()
