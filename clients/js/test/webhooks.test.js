// Webhooks: verifyWebhook against signatures of the official Standard
// Webhooks library (the npm package standardwebhooks, and the vectors the
// official Go library signed: clients/testdata/webhook-vectors.json), and
// endpoint management plus a live delivery from the real service to a
// receiver on loopback (deploy/clientstest starts the services).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { Webhook as OfficialWebhook } from "standardwebhooks";
import { ApiError, WebhookVerificationError, verifyWebhook } from "../dist/index.js";
import { serviceClient } from "../testsupport/env.js";

const vectors = JSON.parse(await readFile(new URL("../../testdata/webhook-vectors.json", import.meta.url), "utf8"));

test("every vector signed by the official Go library has its outcome", async () => {
  assert.ok(vectors.length >= 10);
  for (const v of vectors) {
    const run = verifyWebhook(v.secrets, v.headers, v.body, { now: new Date(v.now * 1000) });
    if (v.expect === "ok") {
      const ev = await run;
      assert.equal(ev.id, v.headers["webhook-id"], v.name);
    } else {
      await assert.rejects(run, (err) => err instanceof WebhookVerificationError && err.reason === v.expect, v.name);
    }
  }
});

test("signatures of the npm package standardwebhooks verify, as bytes or text, with Headers or a record", async () => {
  const secret = vectors[0].secrets[0];
  const official = new OfficialWebhook(secret);
  const body = vectors[0].body;
  const id = vectors[0].headers["webhook-id"];
  const now = new Date();
  const signature = official.sign(id, now, body);
  const ts = String(Math.floor(now.getTime() / 1000));
  const record = { "Webhook-Id": id, "webhook-timestamp": ts, "webhook-signature": signature };
  const ev = await verifyWebhook([secret], record, body);
  assert.equal(ev.type, "message.created");
  assert.equal(ev.data.message.body, "héllo");
  await verifyWebhook(secret, new Headers(record), new TextEncoder().encode(body));
  // The official library accepts what this one accepts.
  official.verify(body, { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": signature });
  // Another secret, an altered body, and a stale timestamp are refused.
  await assert.rejects(verifyWebhook("whsec_" + btoa("x".repeat(32)), record, body), (e) => e.reason === "signature");
  await assert.rejects(verifyWebhook(secret, record, body.replace("héllo", "hallo")), (e) => e.reason === "signature");
  await assert.rejects(verifyWebhook(secret, record, body, { now: new Date(now.getTime() + 301_000) }), (e) => e.reason === "timestamp");
  // The clock is a Date, as in every client's own time type or seconds:
  // milliseconds, the unit of an earlier version, are refused, not misread.
  await assert.rejects(verifyWebhook(secret, record, body, { now: now.getTime() }), TypeError);
});

test("endpoint management and a live delivery, under both secrets while a rotation overlaps", async () => {
  const got = [];
  let arrived;
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks) });
      arrived?.();
      res.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const next = async (n) => {
    while (got.length < n) await new Promise((resolve) => (arrived = resolve));
    return got[n - 1];
  };
  try {
    const c = serviceClient();
    const url = `http://127.0.0.1:${server.address().port}/hook`;
    const created = await c.createWebhook({ url, events: ["*"], description: "js suite" });
    assert.match(created.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    const read = await c.getWebhook(created.id);
    assert.equal(read.secret, undefined);
    assert.equal(read.url, url);
    const listed = [];
    for await (const w of c.webhooks({ limit: 1 })) listed.push(w.id);
    assert.ok(listed.includes(created.id));
    assert.equal((await c.updateWebhook(created.id, { description: "renamed" })).description, "renamed");

    const delivery = await c.testWebhook(created.id);
    assert.equal(delivery.state, "pending");
    let d = await next(1);
    let ev = await verifyWebhook([created.secret], d.headers, d.body);
    assert.equal(ev.type, "webhook.test");
    assert.equal(ev.sequence, null);
    assert.equal(ev.data.endpointId, created.id);

    const rotated = await c.rotateWebhookSecret(created.id, { overlapSeconds: 3600 });
    await c.testWebhook(created.id);
    d = await next(2);
    assert.equal(d.headers["webhook-signature"].split(" ").length, 2);
    for (const s of [created.secret, rotated]) await verifyWebhook(s, d.headers, d.body);

    const log = [];
    for await (const x of c.webhookDeliveries(created.id)) log.push(x);
    assert.equal(log.length, 2);
    await c.retryWebhookDelivery(created.id, delivery.id);
    d = await next(3);
    assert.equal(d.headers["webhook-id"], delivery.eventId);

    await c.deleteWebhook(created.id);
    await assert.rejects(c.getWebhook(created.id), (e) => e instanceof ApiError && e.code === "not_found");
    await assert.rejects(c.createWebhook({ url: "ftp://example.com/" }), (e) => e instanceof ApiError && e.status === 400);
  } finally {
    server.close();
  }
});
