// The environment deploy/clientstest gives the suite (see its doc.go): the
// services' URLs and the credentials of the suite's own account.
import assert from "node:assert/strict";
import { ApiError, PlatformClient } from "../dist/index.js";

function required(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run this suite through the harness (make test-clients, or go test ./deploy/clientstest/...), which starts the services and seeds an account`);
  }
  return v;
}

export const env = {
  get accountUrl() { return required("ACME_TEST_ACCOUNT_URL"); },
  get conversationsUrl() { return required("ACME_TEST_CONVERSATIONS_URL"); },
  get accountName() { return required("ACME_TEST_ACCOUNT_NAME"); },
  get username() { return required("ACME_TEST_USERNAME"); },
  get password() { return required("ACME_TEST_PASSWORD"); },
  get userId() { return required("ACME_TEST_USER_ID"); },
  get otherUsername() { return required("ACME_TEST_OTHER_USERNAME"); },
  get otherPassword() { return required("ACME_TEST_OTHER_PASSWORD"); },
  get otherUserId() { return required("ACME_TEST_OTHER_USER_ID"); },
  get lockoutUsername() { return required("ACME_TEST_LOCKOUT_USERNAME"); },
  get lockoutPassword() { return required("ACME_TEST_LOCKOUT_PASSWORD"); },
  get clientId() { return required("ACME_TEST_CLIENT_ID"); },
  get clientSecret() { return required("ACME_TEST_CLIENT_SECRET"); },
  get tokenTTL() { return Number(required("ACME_TEST_TOKEN_TTL")); },
  get definitionName() { return required("ACME_TEST_DEFINITION_NAME"); },
  get definitionType() { return required("ACME_TEST_DEFINITION_TYPE"); },
  get browserOrigin() { return required("ACME_TEST_BROWSER_ORIGIN"); },
  get faultProxyUrl() { return required("ACME_TEST_FAULT_PROXY_URL"); },
};

/** A client of the suite's first user (or of other credentials). */
export function userClient(overrides = {}) {
  return new PlatformClient({
    accountUrl: env.accountUrl,
    conversationsUrl: env.conversationsUrl,
    credentials: { accountName: env.accountName, username: env.username, password: env.password },
    ...overrides,
  });
}

/** A client of the suite's service client (client credentials). */
export function serviceClient(overrides = {}) {
  return new PlatformClient({
    accountUrl: env.accountUrl,
    conversationsUrl: env.conversationsUrl,
    credentials: { clientId: env.clientId, clientSecret: env.clientSecret },
    ...overrides,
  });
}

/**
 * A fetch that records every request's method and path, and the bodies
 * of the token responses, so that a test can see what the client did.
 */
export function recordingFetch() {
  const calls = [];
  const tokenBodies = [];
  const f = async (url, init = {}) => {
    const u = new URL(url);
    calls.push(`${init.method ?? "GET"} ${u.pathname}`);
    const res = await fetch(url, init);
    if (res.ok && (u.pathname === "/login" || u.pathname === "/token/refresh")) {
      tokenBodies.push(await res.clone().json());
    }
    return res;
  };
  return { fetch: f, calls, tokenBodies };
}

/** Runs fn, which must throw an ApiError; returns it. */
export async function apiError(fn) {
  try {
    await fn();
  } catch (err) {
    assert.ok(err instanceof ApiError, `want an ApiError, got ${err}`);
    return err;
  }
  assert.fail("no error");
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A proxy of deploy/clientstest's fault proxy in front of a real service
 * (see its faultproxy.go): spec is { upstream, method, pathPrefix, drop,
 * cutAfterEvents?, refuseTokens?, refuseFrom? }. Returns { url, report(),
 * close() }.
 */
export async function faultProxy(spec) {
  const control = env.faultProxyUrl;
  const res = await fetch(control + "/proxies", { method: "POST", body: JSON.stringify(spec) });
  if (res.status !== 201) throw new Error(`POST /proxies: ${res.status} ${await res.text()}`);
  const { id, url } = await res.json();
  return {
    url,
    async report() {
      const r = await fetch(`${control}/proxies/${id}`);
      return r.json();
    },
    async close() {
      await (await fetch(`${control}/proxies/${id}`, { method: "DELETE" })).body?.cancel();
    },
  };
}
