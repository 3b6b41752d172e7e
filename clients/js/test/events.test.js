// The event feed and the live stream against the real services: a
// conversation created, given a message and closed is three events, in
// order, through both; a stored position resumes the feed, and a stream
// whose connection is cut (deploy/clientstest's fault proxy) resumes
// after the last event it received, with nothing lost or repeated; a
// token the service refuses at a reconnection is renewed once, not twice.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ApiError } from "../dist/index.js";
import { env, faultProxy, sleep, userClient } from "../testsupport/env.js";

// RFC 3339 UTC to the millisecond (trailing zeros of the fraction left out, as every timestamp of the API).
const rfc3339ms = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$/;

/** The position after every event the client may see so far. */
async function currentPosition(client) {
  const feed = client.events({ limit: 1000 });
  for await (const _ of feed);
  return feed.position ?? 0;
}

/**
 * Reads feed (again and again: each pass resumes where the last ended)
 * until it has given `count` events of the conversation; returns those.
 * Events reach the feed shortly after their change (the relay), so the
 * first passes may come short.
 */
async function eventsOf(feed, conversationId, count) {
  const got = [];
  for (;;) {
    for await (const event of feed) {
      if (event.data.conversation.id === conversationId) got.push(event);
    }
    if (got.length >= count) return got;
    await sleep(50);
  }
}

/**
 * A fault proxy in front of the conversations service that streams the
 * event streams through, cutting the first `drop` (default none) after
 * their first event; `faults` adds to its spec.
 */
function streamProxy(faults) {
  return faultProxy({ upstream: env.conversationsUrl, method: "GET", pathPrefix: "/v1/events/stream", drop: 0, cutAfterEvents: 1, ...faults });
}

/** Checks the three events of a conversation created, given message m and closed. */
function assertLifecycle(events, conv, m) {
  assert.deepEqual(
    events.map((e) => e.type),
    ["conversation.created", "message.created", "conversation.updated"],
  );
  for (const [i, e] of events.entries()) {
    assert.match(e.id, /^evt_/);
    assert.match(e.timestamp, rfc3339ms);
    assert.equal(typeof e.sequence, "number");
    if (i > 0) assert.ok(e.sequence > events[i - 1].sequence, "sequences increase");
  }
  const [created, message, updated] = events;
  assert.equal(created.data.conversation.subject, conv.subject);
  assert.equal(created.data.conversation.status, "open");
  assert.deepEqual(message.data.message, m);
  assert.equal(message.data.conversation.lastMessageAt !== null, true);
  assert.deepEqual(updated.data.changes, { status: "open" });
  assert.equal(updated.data.conversation.status, "closed");
}

test("create, post, close: three events in order through the feed, which resumes from a stored position", async () => {
  const client = userClient();
  const start = await currentPosition(client);
  const conv = await client.createConversation({ subject: "events through the feed" });
  const m = await client.postMessage(conv.id, { body: "an event" });
  await client.updateConversation(conv.id, { status: "closed" });

  const feed = client.events({ after: start, limit: 2 });
  const events = await eventsOf(feed, conv.id, 3);
  assertLifecycle(events, conv, m);
  assert.ok(feed.position >= events[2].sequence, `position ${feed.position}`);

  // A consumer that stored the position after the first event resumes
  // right after it.
  const resumed = await eventsOf(client.events({ after: events[0].sequence }), conv.id, 2);
  assert.deepEqual(resumed.map((e) => e.id), [events[1].id, events[2].id]);

  // The types filter; the next link moves on past what it left out.
  const page = await client.eventsPage({ after: start, types: ["message.created"], limit: 1000 });
  assert.deepEqual(page.items.filter((e) => e.data.conversation.id === conv.id).map((e) => e.id), [events[1].id]);
  assert.ok(page.items.every((e) => e.type === "message.created"));
  assert.ok(page.position >= events[2].sequence, `position ${page.position}`);
});

test("bad feed parameters are a 400 ApiError", async () => {
  const client = userClient();
  for (const options of [{ types: ["conversation.deleted"] }, { limit: 1001 }, { limit: 0 }]) {
    await assert.rejects(client.eventsPage(options), (err) => {
      assert.ok(err instanceof ApiError, String(err));
      assert.equal(err.status, 400);
      return true;
    });
  }
  // The stream refuses them before it starts, with the same error.
  await assert.rejects(
    (async () => {
      for await (const _ of client.streamEvents({ types: ["conversation.deleted"] }));
    })(),
    (err) => err instanceof ApiError && err.status === 400,
  );
});

test("the stream delivers the three events, and resumes a cut connection after the last event it received", async () => {
  const client = userClient();
  const start = await currentPosition(client);
  // The first stream through this proxy is cut after its first event.
  const proxy = await streamProxy({ drop: 1 });
  const stream = userClient({ conversationsUrl: proxy.url }).streamEvents({ after: start });
  const received = [];
  let onFirstConnection = 0; // events that came before the cut
  const mine = [];
  try {
    const conv = await client.createConversation({ subject: "events through the stream" });
    let m;
    for await (const event of stream) {
      received.push(event);
      onFirstConnection += stream.connections === 1 ? 1 : 0;
      if (event.data.conversation.id !== conv.id) continue;
      mine.push(event);
      if (mine.length === 1) {
        // Live: the message and the close happen while the stream runs.
        m = await client.postMessage(conv.id, { body: "a live event" });
        await client.updateConversation(conv.id, { status: "closed" });
      }
      if (mine.length === 3) break;
    }
    assertLifecycle(mine, conv, m);

    const report = await proxy.report();
    assert.equal(report.dropped, 1);
    assert.ok(stream.connections >= 2, `connections ${stream.connections}`);
    assert.equal(report.forwarded[0].headers["Last-Event-Id"], undefined);
    // Cut after its first event (or, on a machine slow enough, ended by
    // its token before any): resumed after the last event received.
    assert.ok(onFirstConnection <= 1, `${onFirstConnection} events before the cut`);
    const resumedAfter = onFirstConnection === 1 ? String(received[0].sequence) : undefined;
    assert.equal(report.forwarded[1].headers["Last-Event-Id"], resumedAfter, "resumed after the last event received");
    assert.equal(stream.position, mine[2].sequence);

    // No gap, no duplicate: the stream gave exactly what the feed has.
    const fromFeed = [];
    for await (const event of client.events({ after: start })) {
      if (event.sequence > mine[2].sequence) break;
      fromFeed.push(event.id);
    }
    assert.deepEqual(received.map((e) => e.id), fromFeed);
  } finally {
    await proxy.close();
  }
});

test("the stream outlives its token: it reconnects with a fresh one and Last-Event-ID, renews a refused one, and misses nothing", async () => {
  const client = userClient();
  const start = await currentPosition(client);
  // A proxy that cuts nothing (drop 0), to see the stream's requests; the
  // service refuses the token of the first reconnection (401
  // invalid_token, as it answers a token that expired).
  const proxy = await streamProxy({ refuseFrom: 1, refuseTokens: 1 });
  try {
    const stream = userClient({ conversationsUrl: proxy.url }).streamEvents({ after: start });
    const conv = await client.createConversation({ subject: "a stream across its token's expiry" });
    const received = []; // [event, the connection it came on]
    const consumer = (async () => {
      for await (const event of stream) {
        received.push([event, stream.connections]);
        if (event.type === "message.created" && event.data.message.body === "after the token expired") return;
      }
    })();
    // The service ends the stream when its token expires (a few seconds
    // here); the loop connects again by itself.
    while (stream.connections < 2) await sleep(50);
    await client.postMessage(conv.id, { body: "after the token expired" });
    await consumer;

    const mine = received.filter(([e]) => e.data.conversation.id === conv.id).map(([e]) => e.type);
    assert.deepEqual(mine, ["conversation.created", "message.created"]);
    const { forwarded } = await proxy.report();
    // (A slow machine may see the third connection's token expire too.)
    assert.deepEqual(forwarded.slice(0, 3).map((f) => f.tokenRefused), [false, true, false]);
    const [first, refused, second] = forwarded.map((f) => f.headers);
    assert.notEqual(refused.Authorization, first.Authorization, "a fresh token");
    assert.notEqual(second.Authorization, refused.Authorization, "the refused token renewed");
    const before = received.filter(([, connection]) => connection === 1).at(-1)?.[0];
    const resumedAfter = before === undefined ? undefined : String(before.sequence);
    assert.equal(refused["Last-Event-Id"], resumedAfter);
    assert.equal(second["Last-Event-Id"], resumedAfter);
  } finally {
    await proxy.close();
  }
});

test("a token refused again right after its renewal ends the stream with the ApiError, without a third try", async () => {
  const proxy = await streamProxy({ refuseTokens: 2 });
  try {
    const stream = userClient({ conversationsUrl: proxy.url }).streamEvents();
    await assert.rejects(
      (async () => {
        for await (const _ of stream);
      })(),
      (err) => err instanceof ApiError && err.status === 401 && err.code === "invalid_token",
    );
    const { forwarded } = await proxy.report();
    assert.deepEqual(forwarded.map((f) => f.tokenRefused), [true, true]);
    assert.notEqual(forwarded[1].headers.Authorization, forwarded[0].headers.Authorization, "renewed once");
  } finally {
    await proxy.close();
  }
});
