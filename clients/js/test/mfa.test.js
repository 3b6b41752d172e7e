// A second factor against the real services: a user enrols a TOTP (codes
// computed here with node:crypto, an implementation of RFC 6238 of its
// own), a login without a code is a MfaRequiredError, one with a code or a
// recovery code succeeds, a code is not accepted twice, and a backend's
// reset lets the user sign in with the password alone.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { ApiError, MfaRequiredError } from "../dist/index.js";
import { apiError, env, serviceClient, userClient } from "../testsupport/env.js";

const password = () => "pw-" + randomBytes(16).toString("hex");

function base32Decode(s) {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let bits = 0;
  let value = 0;
  const out = [];
  for (const ch of s.replace(/=+$/, "")) {
    value = (value << 5) | alphabet.indexOf(ch);
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  return Buffer.from(out);
}

/** The TOTP code of secret (base32) `steps` 30-second steps from now. */
function totp(secret, steps = 0) {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(Date.now() / 30000) + steps));
  const mac = createHmac("sha1", base32Decode(secret)).update(counter).digest();
  const offset = mac[mac.length - 1] & 0x0f;
  return String((mac.readUInt32BE(offset) & 0x7fffffff) % 1_000_000).padStart(6, "0");
}

test("a user enrols a second factor and signs in with it", async () => {
  const backend = serviceClient();
  const pw = password();
  const created = await backend.createUser({ username: "js-mfa", password: pw });
  const credentials = { accountName: env.accountName, username: "js-mfa", password: pw };
  const user = userClient({ credentials });

  const enrolment = await user.enrollTotp();
  assert.match(enrolment.otpauthUri, /^otpauth:\/\/totp\//);
  assert.ok(enrolment.otpauthUri.includes(`secret=${enrolment.secret}`));
  const wrong = await apiError(() => user.verifyTotp("000000x"));
  assert.equal(wrong.code, "invalid_otp");
  // The activation uses the current step and the login the next: neither
  // is two steps old if the clock crosses a step meanwhile.
  const recovery = await user.verifyTotp(totp(enrolment.secret, 0));
  assert.equal(recovery.length, 10);
  assert.deepEqual((await user.userInfo()).mfa, ["totp"]);
  assert.deepEqual((await backend.getUser(created.id)).mfa, ["totp"]);

  const again = userClient({ credentials });
  const required = await apiError(() => again.login());
  assert.ok(required instanceof MfaRequiredError && required instanceof ApiError, `${required}`);
  assert.equal(required.code, "mfa_required");
  assert.equal(required.status, 401);
  const code = totp(enrolment.secret, 1);
  await again.loginWithOtp(code);
  assert.equal((await again.userInfo()).sub, created.id);

  const third = userClient({ credentials });
  const replay = await apiError(() => third.loginWithOtp(code));
  assert.equal(replay.code, "invalid_credentials");
  await third.loginWithOtp(recovery[0]);
  const spent = await apiError(() => userClient({ credentials }).loginWithOtp(recovery[0]));
  assert.equal(spent.code, "invalid_credentials");
  const change = await apiError(() => third.changePassword(pw, password()));
  assert.ok(change instanceof MfaRequiredError);
  assert.equal(change.status, 403);
  const wrongPw = await apiError(() => third.removeTotp({ password: "not-the-password" }));
  assert.equal(wrongPw.code, "invalid_current_password");

  await backend.resetUserMfa(created.id);
  const fresh = userClient({ credentials });
  await fresh.login();
  assert.deepEqual((await fresh.userInfo()).mfa, []);
  const second = await fresh.enrollTotp();
  await fresh.verifyTotp(totp(second.secret, 0));
  await fresh.removeTotp({ code: totp(second.secret, 1) });
  assert.deepEqual((await fresh.userInfo()).mfa, []);
  await backend.deleteUser(created.id);
});

test("a client given a user's access token manages that user's second factor", async () => {
  const backend = serviceClient();
  const pw = password();
  const created = await backend.createUser({ username: "js-mfa-token", password: pw });
  const res = await fetch(env.accountUrl + "/login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ accountName: env.accountName, username: "js-mfa-token", password: pw }),
  });
  assert.equal(res.status, 200);
  const { access_token: accessToken } = (await res.json()).tokens;
  const app = userClient({ credentials: { accessToken: () => accessToken } });
  const enrolment = await app.enrollTotp();
  assert.match(enrolment.otpauthUri, /^otpauth:\/\/totp\//);
  assert.equal((await app.verifyTotp(totp(enrolment.secret, 0))).length, 10);
  await app.removeTotp({ code: totp(enrolment.secret, 1) });
  assert.deepEqual((await backend.getUser(created.id)).mfa, []);
  await assert.rejects(() => backend.enrollTotp(), /enrollTotp: a service client has no second factor/);
  await backend.deleteUser(created.id);
});
