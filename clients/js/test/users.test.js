// Users by API and self-service against the real services: a
// backend (the suite's service client, users:read and users:write) signs a
// user up, the user logs in with the library, reads its userinfo and
// changes its password (the old refresh token stops working), then the
// backend disables it (its login fails) and erases it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { apiError, env, recordingFetch, serviceClient, userClient } from "../testsupport/env.js";

const password = () => "pw-" + randomBytes(16).toString("hex");

function userOf(username, pw, overrides = {}) {
  return userClient({ credentials: { accountName: env.accountName, username, password: pw }, ...overrides });
}

test("a backend manages a user who serves itself", async () => {
  const backend = serviceClient();
  const first = password();
  const second = password();

  const weak = await apiError(() => backend.createUser({ username: "js-signup", password: "too-short" }));
  assert.equal(weak.status, 400);
  assert.equal(weak.code, "weak_password");
  assert.equal(weak.fieldErrors[0].field, "password");

  const created = await backend.createUser({ username: "JS-Signup", password: first, name: "Sign Up", email: "signup@example.com" });
  assert.equal(created.username, "js-signup");
  assert.equal(created.name, "Sign Up");
  assert.equal(created.lastLoginAt, null);
  const taken = await apiError(() => backend.createUser({ username: "js-signup", password: second }));
  assert.equal(taken.status, 409);
  assert.equal(taken.code, "username_taken");
  assert.equal((await backend.getUser(created.id)).email, "signup@example.com");
  const page = await backend.listUsersPage({ username: "JS-SIGNUP" });
  assert.deepEqual(page.items.map((u) => u.id), [created.id]);
  assert.equal(page.next, undefined);
  const all = [];
  for await (const u of backend.users({ limit: 1 })) all.push(u.username);
  assert.ok(all.includes("js-signup") && all.includes(env.username), `users: ${all}`);

  // The user logs in with the library and asks who it is.
  const rec = recordingFetch();
  const user = userOf("js-signup", first, { fetch: rec.fetch });
  const info = await user.userInfo();
  assert.equal(info.sub, created.id);
  assert.equal(info.preferred_username, "js-signup");
  assert.equal(info.name, "Sign Up");
  assert.equal(info.email, "signup@example.com");
  assert.equal(info.email_verified, false);
  assert.equal(info.account_name, env.accountName);
  const oldRefresh = rec.tokenBodies.at(-1).tokens.refresh_token;

  const wrong = await apiError(() => user.changePassword("not-the-current-one", second));
  assert.equal(wrong.status, 403);
  assert.equal(wrong.code, "invalid_current_password");
  await user.changePassword(first, second);
  // The client goes on with the new session; the old refresh token is dead.
  assert.equal((await user.userInfo()).sub, created.id);
  const res = await fetch(env.accountUrl + "/token/refresh", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ refresh_token: oldRefresh }),
  });
  assert.equal(res.status, 401);
  assert.notEqual((await backend.getUser(created.id)).lastLoginAt, null);

  // The backend disables the user: its login fails.
  const disabled = await backend.updateUser(created.id, { disabled: true });
  assert.equal(disabled.disabled, true);
  const refused = await apiError(() => userOf("js-signup", second).login());
  assert.equal(refused.code, "invalid_credentials");

  const cleared = await backend.updateUser(created.id, { name: null });
  assert.equal(cleared.name, null);
  assert.equal((await apiError(() => backend.setUserPassword(created.id, "password"))).code, "weak_password");
  await backend.setUserPassword(created.id, password());
  await backend.deleteUser(created.id);
  assert.equal((await apiError(() => backend.getUser(created.id))).status, 404);

  // A user's own token reaches no management call.
  const scope = await apiError(() => userOf(env.username, env.password).listUsersPage());
  assert.equal(scope.status, 403);
  assert.equal(scope.code, "insufficient_scope");
});
