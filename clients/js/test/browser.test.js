// The library in a real headless Chromium (Debian's), from a page of
// another origin than the services: the calls are cross-origin, so they
// work only through the services' CORS answers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { env } from "../testsupport/env.js";

const executablePath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const dist = fileURLToPath(new URL("../dist/", import.meta.url));

/** Serves an empty page at / and the built library under /dist/. */
async function servePage(origin) {
  const server = createServer(async (req, res) => {
    const path = new URL(req.url, origin).pathname;
    if (path === "/") {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
      res.end("<!doctype html><title>client test</title>");
      return;
    }
    const rel = normalize(path.slice("/dist/".length));
    if (!path.startsWith("/dist/") || rel.startsWith("..")) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = await readFile(join(dist, rel));
      const type = extname(rel) === ".js" ? "text/javascript" : "application/octet-stream";
      res.writeHead(200, { "Content-Type": type }).end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  const { hostname, port } = new URL(origin);
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(Number(port), hostname, resolve);
  });
  return server;
}

test("in Chromium from another origin: log in, page through Link, post a message, read a 412, follow the event stream", async () => {
  const origin = env.browserOrigin;
  assert.notEqual(new URL(origin).origin, new URL(env.conversationsUrl).origin);
  const server = await servePage(origin);
  const profile = await mkdtemp(join(tmpdir(), "chromium-profile-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    const page = await context.newPage();
    const consoleErrors = [];
    page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
    await page.goto(origin + "/");
    const cfg = {
      accountUrl: env.accountUrl,
      conversationsUrl: env.conversationsUrl,
      credentials: { accountName: env.accountName, username: env.username, password: env.password },
    };
    const got = await page.evaluate(async (cfg) => {
      const { PlatformClient, ApiError } = await import("/dist/index.js");
      const c = new PlatformClient(cfg);
      await c.login();
      const definitions = await c.listDefinitions();
      const created = [];
      for (let i = 0; i < 5; i++) created.push((await c.createConversation({ subject: `browser ${i}` })).id);
      // Page by page: the next link is read from the exposed Link header.
      const pages = [];
      let page = await c.listConversationsPage({ limit: 2 });
      pages.push(page.items.map((x) => x.id));
      while (page.next) {
        page = await c.listConversationsPage({ page: page.next });
        pages.push(page.items.map((x) => x.id));
      }
      const message = await c.postMessage(created[0], { body: "hello from a browser" });
      // A stale ETag: another client changes the conversation in between.
      const other = new PlatformClient(cfg);
      await other.getConversation(created[1]);
      const etag = c.etag(created[1]);
      await other.updateConversation(created[1], { subject: "changed elsewhere" });
      let stale;
      try {
        await c.updateConversation(created[1], { subject: "mine" });
      } catch (err) {
        stale = { isApiError: err instanceof ApiError, status: err.status, code: err.code, requestId: err.requestId };
      }
      return { origin: location.origin, definitions: definitions.length, created, pages, message, etag, stale };
    }, cfg);

    assert.equal(got.origin, new URL(origin).origin);
    assert.equal(got.definitions, 1);
    const ids = got.pages.flat();
    assert.ok(got.pages.length >= 3, `pages ${JSON.stringify(got.pages)}`);
    assert.equal(new Set(ids).size, ids.length);
    for (const id of got.created) assert.ok(ids.includes(id), `${id} skipped`);
    assert.equal(got.message.body, "hello from a browser");
    assert.equal(got.message.conversationId, got.created[0]);
    assert.ok(got.etag, "the ETag header was not readable");
    assert.deepEqual({ ...got.stale, requestId: Boolean(got.stale?.requestId) }, {
      isApiError: true,
      status: 412,
      code: "precondition_failed",
      requestId: true,
    });
    // The live stream, read with fetch (the bearer in the Authorization
    // header, cross-origin): a conversation created, given a message and
    // closed while the page follows it.
    const streamed = await page.evaluate(async (cfg) => {
      const { PlatformClient } = await import("/dist/index.js");
      const c = new PlatformClient(cfg);
      const feed = c.events({ limit: 1000 });
      for await (const _ of feed);
      const conv = await c.createConversation({ subject: "browser events" });
      const types = [];
      for await (const e of c.streamEvents({ after: feed.position ?? 0 })) {
        if (e.data.conversation.id !== conv.id) continue;
        types.push(e.type);
        if (types.length === 1) {
          await c.postMessage(conv.id, { body: "live in a browser" });
          await c.updateConversation(conv.id, { status: "closed" });
        }
        if (types.length === 3) break;
      }
      return types;
    }, cfg);
    assert.deepEqual(streamed, ["conversation.created", "message.created", "conversation.updated"]);

    // Chrome logs every 4xx it fetched (the 412 above, a favicon); none
    // may be a CORS refusal.
    assert.deepEqual(consoleErrors.filter((m) => /CORS|Access-Control/i.test(m)), []);
  } finally {
    await context.close();
    await new Promise((resolve) => server.close(resolve));
    await rm(profile, { recursive: true, force: true });
  }
});
