// The behaviours every client of this repository shares (the table of the
// top-level README): the ETag after a message, the retry policy, the code
// constants, error texts kept as the service wrote them, and deeply nested
// answers. Against the real services; faults are injected through the
// client's fetch option, in front of the real answers.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { ErrorCodes, PlatformClient, isApiError } from "../dist/index.js";
import { apiError, env, userClient } from "../testsupport/env.js";

/** A fetch that fails as the network would, for the requests fail(method, url, n) picks (n counts them from 1). */
function faultyFetch(fail) {
  const seen = [];
  const f = async (url, init = {}) => {
    const method = init.method ?? "GET";
    seen.push(`${method} ${new URL(url).pathname}`);
    const fault = fail(method, new URL(url).pathname, seen.length, init);
    if (fault === "refuse") throw new TypeError("fetch failed");
    if (fault instanceof Response) return fault;
    const res = await fetch(url, init);
    if (fault === "lose-answer") {
      await res.body?.cancel();
      throw new TypeError("fetch failed"); // processed, but the answer never came
    }
    return res;
  };
  return { fetch: f, seen };
}

describe("the ETag after a message", () => {
  test("an update after a message is conditional on the state after it", async () => {
    const client = userClient();
    const conv = await client.createConversation({ subject: "etag after a message" });
    const created = client.etag(conv.id);
    await client.postMessage(conv.id, { body: "moves the conversation's ETag" });
    assert.ok(client.etag(conv.id));
    assert.notEqual(client.etag(conv.id), created);
    // No 412, and not unconditional: the client tracked the tag the message made.
    assert.equal((await client.updateConversation(conv.id, { subject: "after the message" })).subject, "after the message");

    await client.postMessage(conv.id, { body: "another" });
    await userClient().updateConversation(conv.id, { status: "snoozed" }); // someone else, after the message
    const err = await apiError(() => client.updateConversation(conv.id, { subject: "overwrites?" }));
    assert.equal(err.status, 412);
    assert.equal(err.code, ErrorCodes.PreconditionFailed);
    assert.equal((await userClient().getConversation(conv.id)).subject, "after the message");
  });
});

describe("retries", () => {
  test("a read is sent again after a network failure", async () => {
    const f = faultyFetch((method, path, n) => (method === "GET" && path === "/definitions" && !f.failed ? ((f.failed = true), "refuse") : undefined));
    const defs = await userClient({ fetch: f.fetch }).listDefinitions();
    assert.equal(defs[0].name, env.definitionName);
    assert.deepEqual(f.seen.filter((s) => s === "GET /definitions"), ["GET /definitions", "GET /definitions"]);
  });

  test("a creation whose answer is lost is sent again with its key and creates one", async () => {
    const subject = `lost answer ${crypto.randomUUID()}`;
    let keys = [];
    const f = faultyFetch((method, path, n, init) => {
      if (method !== "POST" || path !== "/v1/conversations") return undefined;
      keys.push(init.headers["Idempotency-Key"]);
      return keys.length === 1 ? "lose-answer" : undefined;
    });
    const client = userClient({ fetch: f.fetch });
    const conv = await client.createConversation({ subject });
    assert.equal(keys.length, 2);
    assert.equal(keys[0], keys[1]);
    const mine = [];
    for await (const c of userClient().conversations({ limit: 100 })) if (c.subject === subject) mine.push(c.id);
    assert.deepEqual(mine, [conv.id]);
  });

  test("a 503 is retried after its Retry-After; one asking longer than maxRetryWait is thrown at once", async () => {
    const unavailable = (retryAfter) =>
      new Response(JSON.stringify({ code: "service_unavailable", status: 503, title: "Service Unavailable" }), {
        status: 503,
        headers: { "Content-Type": "application/problem+json", "Retry-After": retryAfter },
      });
    let injected = 0;
    const f = faultyFetch((method, path) => (path === "/definitions" && injected++ === 0 ? unavailable("1") : undefined));
    assert.equal((await userClient({ fetch: f.fetch }).listDefinitions())[0].name, env.definitionName);
    assert.equal(f.seen.filter((s) => s === "GET /definitions").length, 2);

    const g = faultyFetch((method, path) => (path === "/definitions" ? unavailable("60") : undefined));
    const err = await apiError(() => userClient({ fetch: g.fetch }).listDefinitions());
    assert.equal(err.code, ErrorCodes.ServiceUnavailable);
    assert.equal(err.retryAfter, 60);
    assert.equal(g.seen.filter((s) => s === "GET /definitions").length, 1);
  });

  test("attempts are bounded, and an update is never retried", async () => {
    const f = faultyFetch((method, path) => (path === "/definitions" || method === "PATCH" ? "refuse" : undefined));
    const client = userClient({ fetch: f.fetch, maxRetries: 1 });
    await assert.rejects(client.listDefinitions(), TypeError);
    assert.equal(f.seen.filter((s) => s === "GET /definitions").length, 2);
    const conv = await client.createConversation({ subject: "no retried PATCH" });
    await assert.rejects(client.updateConversation(conv.id, { subject: "x" }), TypeError);
    assert.equal(f.seen.filter((s) => s.startsWith("PATCH ")).length, 1);
  });
});

describe("error shape", () => {
  test("a constant for every code of docs/errors.md", async () => {
    const doc = await readFile(new URL("../../../docs/errors.md", import.meta.url), "utf8");
    const codes = [...doc.matchAll(/^\| *\d{3} *\| *`([a-z_]+)`/gm)].map((m) => m[1]);
    assert.ok(codes.length > 5, "docs/errors.md lists the codes in a table");
    const values = new Set(Object.values(ErrorCodes));
    for (const code of codes) assert.ok(values.has(code), `ErrorCodes lacks ${code}`);
  });

  test("one-letter and common-word passwords leave the service's text intact", async () => {
    const login = (password) =>
      new PlatformClient({
        accountUrl: env.accountUrl,
        conversationsUrl: env.conversationsUrl,
        credentials: { accountName: env.accountName, username: `nobody-${crypto.randomUUID()}`, password },
      }).login();
    const raw = await fetch(env.accountUrl + "/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ accountName: env.accountName, username: `nobody-${crypto.randomUUID()}`, password: "x" }),
    });
    const { detail } = await raw.json();
    for (const password of ["e", "is", "wrong"]) {
      const err = await apiError(() => login(password));
      assert.ok(isApiError(err, ErrorCodes.InvalidCredentials));
      assert.equal(err.detail, detail);
      assert.equal(err.message, `POST /login: 401 invalid_credentials: ${detail}`);
    }
  });
});

describe("deeply nested answers", () => {
  test("10,000 levels parse without a stack overflow", async () => {
    const depth = 10_000;
    const deep = '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
    const server = createServer((req, res) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(req.url.endsWith("/messages") ? `[{"id":"msg_1","metadata":${deep}}]` : `{"id":"cnv_1","metadata":${deep}}`);
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const client = userClient({ conversationsUrl: `http://127.0.0.1:${server.address().port}` });
      const messages = [];
      for await (const m of client.messages("cnv_1")) messages.push(m);
      let level = 0;
      for (let v = messages[0].metadata; typeof v === "object"; v = v.a) level++;
      assert.equal(level, depth);
      assert.equal((await client.getConversation("cnv_1")).id, "cnv_1");
    } finally {
      server.close();
    }
  });
});
