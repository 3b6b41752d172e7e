// The parts of the library that need no service: Link parsing, Retry-After,
// and what a client shows of itself before any call.
import { test } from "node:test";
import assert from "node:assert/strict";
import { inspect } from "node:util";
import { PlatformClient, SseParser, nextLink, parseRetryAfter } from "../dist/index.js";

test("nextLink finds rel=next among several links and parameters", () => {
  assert.equal(nextLink('</v1/conversations?limit=7&cursor=abc>; rel="next"'), "/v1/conversations?limit=7&cursor=abc");
  assert.equal(nextLink('</a>; rel="prev", </b;c,d>; title="x, y; z"; rel="next last"'), "/b;c,d");
  assert.equal(nextLink("</a>; rel=next; anchor=\"/x\", </b>; REL=NEXT"), "/b");
  assert.equal(nextLink('</a>; rel="prev"'), undefined);
  assert.equal(nextLink(null), undefined);
  assert.throws(() => nextLink("no angle brackets"), /malformed Link header/);
});

test("parseRetryAfter reads seconds and HTTP dates", () => {
  assert.equal(parseRetryAfter("120"), 120);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("soon"), undefined);
  const inAMinute = new Date(Date.now() + 60_000).toUTCString();
  const s = parseRetryAfter(inAMinute);
  assert.ok(s > 55 && s <= 61, `${s}`);
  assert.equal(parseRetryAfter("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
});

test("a client shows no credential before or without any call", () => {
  const password = "pw-very-secret";
  const secret = "cs_very-secret";
  const clients = [
    new PlatformClient({ accountUrl: "http://a.test", conversationsUrl: "http://c.test", credentials: { accountName: "x", username: "u", password } }),
    new PlatformClient({ accountUrl: "http://a.test", conversationsUrl: "http://c.test", credentials: { clientId: "cli_1", clientSecret: secret } }),
  ];
  for (const c of clients) {
    for (const form of [String(c), inspect(c, { showHidden: true, depth: 10 }), JSON.stringify(c)]) {
      assert.ok(!form.includes(password) && !form.includes(secret), form);
    }
  }
});

test("bad options are refused at construction", () => {
  const ok = { accountUrl: "http://a.test", conversationsUrl: "http://c.test", credentials: { accountName: "x", username: "u", password: "p" } };
  assert.throws(() => new PlatformClient({ ...ok, accountUrl: "localhost:8080" }), /accountUrl/);
  assert.throws(() => new PlatformClient({ ...ok, credentials: { accountName: "x", username: "u" } }), /password/);
  assert.throws(() => new PlatformClient({ ...ok, credentials: { clientId: "cli_1" } }), /clientSecret/);
  assert.throws(() => new PlatformClient({ ...ok, credentials: { accessToken: "eyJ" } }), /accessToken must be a function/);
});

test("an app's access token: asked for before each call, renewed once after a 401 invalid_token", async () => {
  const asked = [];
  const sent = [];
  let refused = false;
  const fetch = async (url, init) => {
    sent.push(init.headers.Authorization);
    if (!refused) {
      refused = true;
      return new Response(JSON.stringify({ type: "about:blank", title: "Unauthorized", status: 401, code: "invalid_token" }), {
        status: 401,
        headers: { "Content-Type": "application/problem+json" },
      });
    }
    return new Response("[]", { status: 200, headers: { "Content-Type": "application/json" } });
  };
  const c = new PlatformClient({
    accountUrl: "http://a.test",
    conversationsUrl: "http://c.test",
    fetch,
    credentials: {
      accessToken: ({ renew }) => {
        asked.push(renew);
        return renew ? "token-2" : "token-1";
      },
    },
  });
  assert.deepEqual(await c.listDefinitions(), []);
  assert.deepEqual(asked, [false, true]);
  assert.deepEqual(sent, ["Bearer token-1", "Bearer token-2"]);
  assert.match(String(c), /token credentials/);
  await assert.rejects(c.changePassword("a", "b"), /only a client given the user's password/);
});

test("SseParser reads the event stream format in chunks of any size", () => {
  const stream =
    ": a comment\r\nretry: 1500\r\n\r\n" +
    'id: 7\nevent: message.created\ndata: {"sequence":7,\ndata:  "x":1}\n\n' +
    "data:no space\rid: 8\r\r" +
    "id\nevent: ignored\n\n" + // an id-only block: the last id is "", nothing is dispatched
    "retry: soon\nid: 9\0\ndata: kept id\n\n" +
    "data: unfinished";
  const want = [
    { id: "7", event: "message.created", data: '{"sequence":7,\n "x":1}' },
    { id: "8", event: "message", data: "no space" },
    { id: "", event: "message", data: "kept id" },
  ];
  // Whole, then one character at a time (CRLF split across chunks included).
  for (const chunks of [[stream], [...stream]]) {
    const p = new SseParser("3");
    const got = chunks.flatMap((c) => p.push(c));
    assert.deepEqual(got, want);
    assert.equal(p.retry, 1500);
    assert.equal(p.lastEventId, "");
  }
  const resumed = new SseParser("41");
  assert.deepEqual(resumed.push("data: a\n\n"), [{ id: "41", event: "message", data: "a" }]);
});

test("events and streamEvents refuse a position that is not a sequence", () => {
  const c = new PlatformClient({ accountUrl: "http://a.test", conversationsUrl: "http://c.test", credentials: { accountName: "x", username: "u", password: "p" } });
  for (const after of [-1, 1.5, Number.NaN]) {
    assert.throws(() => c.events({ after }), /after must be a sequence/);
    assert.throws(() => c.streamEvents({ after }), /after must be a sequence/);
  }
});
