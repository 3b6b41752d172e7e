// The library against the real account and conversations services, started
// and seeded by deploy/clientstest (see testsupport/env.js).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { inspect } from "node:util";
import { PlatformClient, isApiError, newIdempotencyKey } from "../dist/index.js";
import { apiError, env, recordingFetch, serviceClient, sleep, userClient } from "../testsupport/env.js";

/** Everything an iterator yields. */
async function all(iterable) {
  const out = [];
  for await (const v of iterable) out.push(v);
  return out;
}

/** The secret strings a client must never show. */
function assertShowsNone(value, secrets, what) {
  const forms = [String(value), inspect(value, { depth: 10, showHidden: true }), JSON.stringify(value) ?? ""];
  if (value instanceof Error) forms.push(value.message, value.stack ?? "");
  for (const form of forms) {
    for (const secret of secrets) {
      assert.ok(!form.includes(secret), `${what} shows a secret: ${form}`);
    }
  }
}

describe("login", () => {
  test("with username, password and account name", async () => {
    const kinds = [];
    const c = userClient({ onRenew: (k) => kinds.push(k) });
    await c.login();
    assert.deepEqual(kinds, ["login"]);
    const defs = await c.listDefinitions();
    assert.equal(defs.length, 1);
    assert.equal(defs[0].name, env.definitionName);
    assert.equal(defs[0].type, env.definitionType);
  });

  test("with client credentials", async () => {
    const kinds = [];
    const c = serviceClient({ onRenew: (k) => kinds.push(k) });
    await c.login();
    assert.deepEqual(kinds, ["client_credentials"]);
    const defs = await c.listDefinitions();
    assert.deepEqual(defs.map((d) => d.name), [env.definitionName]);
    // A service client creates conversations for users of its account
    // (it is not a participant itself) …
    const conv = await c.createConversation({ subject: "from a backend", participants: [env.userId] });
    assert.deepEqual(conv.participants, [env.userId]);
    const seen = await userClient().getConversation(conv.id);
    assert.equal(seen.subject, "from a backend");
    // … and reads every conversation of the account, also those it does
    // not take part in.
    const users = await userClient().createConversation({ subject: "between users" });
    const listed = (await all(c.conversations({ limit: 100 }))).map((x) => x.id);
    assert.ok(listed.includes(conv.id) && listed.includes(users.id), "the service client does not see the account's conversations");
    assert.equal((await c.getConversation(users.id)).subject, "between users");
    const message = await c.postMessage(conv.id, { body: "posted by a backend" });
    assert.equal(message.author, env.clientId);
  });

  test("wrong credentials are a 401 that shows no secret", async () => {
    const wrong = "wrong-" + env.password;
    const err = await apiError(() => userClient({ credentials: { accountName: env.accountName, username: env.username, password: wrong } }).login());
    assert.equal(err.status, 401);
    assert.equal(err.code, "invalid_credentials");
    assertShowsNone(err, [wrong, env.password], "a login error");

    const secret = env.clientSecret + "x";
    const cerr = await apiError(() => serviceClient({ credentials: { clientId: env.clientId, clientSecret: secret } }).login());
    assert.equal(cerr.status, 401);
    assert.equal(cerr.code, "invalid_client");
    assertShowsNone(cerr, [secret, env.clientSecret], "a client credentials error");
  });

  test("no inspection, string or JSON form shows credentials or tokens", async () => {
    const rec = recordingFetch();
    const c = userClient({ fetch: rec.fetch });
    await c.listDefinitions();
    const t = rec.tokenBodies[0].tokens;
    assertShowsNone(c, [env.password, t.id_token, t.refresh_token, t.access_token], "a user client");
    const s = serviceClient();
    await s.login();
    assertShowsNone(s, [env.clientSecret], "a service client");
  });
});

// Each test waits out a token lifetime: they wait together.
describe("renewal", { concurrency: true }, () => {
  const ttl = () => env.tokenTTL * 1000;

  test("refreshes before expiry, once for concurrent calls", async () => {
    const kinds = [];
    const rec = recordingFetch();
    const c = userClient({ fetch: rec.fetch, onRenew: (k) => kinds.push(k) });
    await c.login();
    await sleep(ttl());
    // Five calls at once when the tokens are due: one refresh.
    await Promise.all(Array.from({ length: 5 }, () => c.listDefinitions()));
    assert.deepEqual(kinds, ["login", "refresh"]);
    assert.equal(rec.calls.filter((x) => x === "POST /token/refresh").length, 1);
    assert.equal(rec.calls.filter((x) => x === "GET /definitions").length, 5);
  });

  test("logs in again when the refresh is refused", async () => {
    const kinds = [];
    const rec = recordingFetch();
    const c = userClient({ fetch: rec.fetch, onRenew: (k) => kinds.push(k) });
    await c.login();
    // The session is revoked behind the client's back.
    const res = await fetch(env.accountUrl + "/logout", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ refresh_token: rec.tokenBodies[0].tokens.refresh_token }),
    });
    assert.equal(res.status, 204);
    await sleep(ttl());
    assert.equal((await c.listDefinitions()).length, 1);
    assert.deepEqual(kinds, ["login", "login"]);
    assert.deepEqual(rec.calls, ["POST /login", "POST /token/refresh", "POST /login", "GET /definitions"]);
  });

  test("client credentials are presented again before expiry", async () => {
    const kinds = [];
    const c = serviceClient({ onRenew: (k) => kinds.push(k) });
    await c.listDefinitions();
    await sleep(ttl());
    await c.listDefinitions();
    assert.deepEqual(kinds, ["client_credentials", "client_credentials"]);
  });
});

describe("conversations", () => {
  test("25 conversations paged 7 at a time: nothing repeated or skipped", async () => {
    const c = userClient({ credentials: { accountName: env.accountName, username: env.otherUsername, password: env.otherPassword } });
    const created = new Set();
    for (let i = 0; i < 25; i++) {
      created.add((await c.createConversation({ subject: `paging ${i}` })).id);
    }
    // Page by page, as the Link headers say.
    const pages = [];
    let page = await c.listConversationsPage({ limit: 7 });
    pages.push(page.items);
    while (page.next) {
      assert.match(page.next, /[?&]cursor=/);
      page = await c.listConversationsPage({ page: page.next });
      pages.push(page.items);
    }
    const ids = pages.flat().map((x) => x.id);
    assert.equal(new Set(ids).size, ids.length, "an id repeated");
    for (const id of created) assert.ok(ids.includes(id), `conversation ${id} skipped`);
    assert.ok(pages.every((p) => p.length <= 7));
    assert.equal(pages.length, Math.ceil(ids.length / 7));
    // Newest activity first, then id: a total order.
    const items = pages.flat();
    for (let i = 1; i < items.length; i++) {
      const [a, b] = [items[i - 1], items[i]];
      const [ta, tb] = [Date.parse(a.updatedAt), Date.parse(b.updatedAt)]; // millisecond precision
      assert.ok(ta > tb || (ta === tb && a.id > b.id), `order at ${i}: ${a.updatedAt} ${a.id}, then ${b.updatedAt} ${b.id}`);
    }
    // The async iterator yields the same sequence.
    assert.deepEqual((await all(c.conversations({ limit: 7 }))).map((x) => x.id), ids);
  });

  test("create, get, PATCH with the last ETag, 412 on a stale one", async () => {
    const alice = userClient();
    const conv = await alice.createConversation({ subject: "draft", participants: [env.otherUserId] });
    assert.equal(conv.status, "open");
    assert.ok(conv.participants.includes(env.userId) && conv.participants.includes(env.otherUserId));
    assert.ok(alice.etag(conv.id), "no ETag remembered from the create");

    const renamed = await alice.updateConversation(conv.id, { subject: "final" });
    assert.equal(renamed.subject, "final");

    // Another editor changes it in between.
    const bob = userClient({ credentials: { accountName: env.accountName, username: env.otherUsername, password: env.otherPassword } });
    assert.equal((await bob.getConversation(conv.id)).subject, "final");
    assert.equal((await bob.updateConversation(conv.id, { status: "snoozed" })).status, "snoozed");

    const err = await apiError(() => alice.updateConversation(conv.id, { subject: "overwrite" }));
    assert.equal(err.status, 412);
    assert.equal(err.code, "precondition_failed");
    // After reading it again, the update goes through.
    assert.equal((await alice.getConversation(conv.id)).status, "snoozed");
    const after = await alice.updateConversation(conv.id, { subject: "merged", status: "open" });
    assert.equal(after.subject, "merged");
    assert.equal(after.status, "open");
  });

  test("participants join and leave", async () => {
    const alice = userClient();
    const bob = userClient({ credentials: { accountName: env.accountName, username: env.otherUsername, password: env.otherPassword } });
    const conv = await alice.createConversation({ subject: "small group" });
    assert.equal((await apiError(() => bob.getConversation(conv.id))).status, 404);
    await alice.addParticipant(conv.id, env.otherUserId);
    await alice.addParticipant(conv.id, env.otherUserId); // idempotent
    assert.deepEqual((await bob.getConversation(conv.id)).participants.sort(), [env.userId, env.otherUserId].sort());
    await bob.removeParticipant(conv.id, env.otherUserId); // bob leaves
    assert.equal((await apiError(() => bob.getConversation(conv.id))).code, "not_found");
    await alice.getConversation(conv.id); // bob's leave changed it: the current ETag
    const last = await apiError(() => alice.removeParticipant(conv.id, env.userId));
    assert.equal(last.status, 409);
    assert.equal(last.code, "last_participant");
  });

  test("a retried create with the same idempotency key creates one conversation", async () => {
    const c = userClient();
    const key = newIdempotencyKey();
    const subject = `idempotent ${key}`;
    const first = await c.createConversation({ subject }, { idempotencyKey: key });
    const retry = await c.createConversation({ subject }, { idempotencyKey: key });
    assert.equal(retry.id, first.id);
    const matching = (await all(c.conversations({ limit: 100 }))).filter((x) => x.subject === subject);
    assert.equal(matching.length, 1);
    // Without a key given, each call is a new conversation.
    const a = await c.createConversation({ subject: "twice" });
    const b = await c.createConversation({ subject: "twice" });
    assert.notEqual(a.id, b.id);
  });
});

describe("messages", () => {
  test("post and list, newest first, across pages", async () => {
    const c = userClient();
    const conv = await c.createConversation({ subject: "with messages" });
    const posted = [];
    for (const body of ["first", "second", "third"]) {
      posted.push(await c.postMessage(conv.id, { body, metadata: { n: posted.length } }));
    }
    assert.equal(posted[0].conversationId, conv.id);
    assert.equal(posted[0].author, env.userId);
    const listed = await all(c.messages(conv.id, { limit: 2 }));
    assert.deepEqual(listed.map((m) => m.body), ["third", "second", "first"]);
    const page = await c.listMessagesPage(conv.id, { limit: 2 });
    assert.equal(page.items.length, 2);
    assert.ok(page.next);
    assert.equal((await c.getMessage(conv.id, posted[1].id)).body, "second");
    // The message raised the conversation to the top of the list.
    const [top] = (await c.listConversationsPage({ limit: 1 })).items;
    assert.equal(top.id, conv.id);
    assert.ok(top.lastMessageAt);
  });

  test("a message to a closed conversation is a 409", async () => {
    const c = userClient();
    const conv = await c.createConversation({ subject: "closing" });
    await c.updateConversation(conv.id, { status: "closed" });
    const err = await apiError(() => c.postMessage(conv.id, { body: "too late" }));
    assert.equal(err.status, 409);
    assert.equal(err.code, "conversation_closed");
  });
});

describe("errors", () => {
  test("a 400 carries its field errors", async () => {
    const err = await apiError(() => userClient().createConversation({ subject: "x".repeat(301), status: "archived" }));
    assert.equal(err.status, 400);
    assert.equal(err.code, "validation_failed");
    const fields = err.fieldErrors.map((f) => f.field).sort();
    assert.ok(fields.includes("subject"), `fields ${fields}`);
    assert.ok(err.fieldErrors.every((f) => f.reason));
    assert.ok(err.requestId, "no request id");
  });

  test("a 404", async () => {
    const err = await apiError(() => userClient().getConversation("cnv_doesnotexist"));
    assert.equal(err.status, 404);
    assert.equal(err.code, "not_found");
    assert.ok(isApiError(err, "not_found"));
  });

  test("a 401 on a bad bearer", async () => {
    // A token that is not one: what a caller of a revoked or foreign
    // session would send, here straight through the fetch option.
    const c = userClient({
      fetch: (url, init) => fetch(url, { ...init, headers: { ...init.headers, ...(init.headers?.Authorization ? { Authorization: "Bearer not.a.token" } : {}) } }),
    });
    const err = await apiError(() => c.listDefinitions());
    assert.equal(err.status, 401);
    assert.equal(err.code, "invalid_token");
  });

  test("a 429 with Retry-After after five wrong passwords", async () => {
    const creds = (password) => ({ accountName: env.accountName, username: env.lockoutUsername, password });
    for (let i = 0; i < 5; i++) {
      const err = await apiError(() => userClient({ credentials: creds(`wrong-${i}`) }).login());
      assert.equal(err.status, 401);
    }
    // Locked: even the right password waits.
    const err = await apiError(() => userClient({ credentials: creds(env.lockoutPassword) }).login());
    assert.equal(err.status, 429);
    assert.ok(err.retryAfter > 0, `Retry-After ${err.retryAfter}`);
    assertShowsNone(err, [env.lockoutPassword], "a 429");
  });

  test("a next link to another origin is refused", async () => {
    const c = new PlatformClient({
      accountUrl: env.accountUrl,
      conversationsUrl: env.conversationsUrl,
      credentials: { accountName: env.accountName, username: env.username, password: env.password },
    });
    await assert.rejects(c.listConversationsPage({ page: "http://elsewhere.example/v1/conversations" }), /another origin/);
  });
});
