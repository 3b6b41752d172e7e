// What the suites share: the environment go test sets (see doc.go),
// discovery with openid-client, and a browser's part of the authorization
// code flow done with fetch: a cookie jar, the sign-in page read and its
// form submitted as a browser would.
import assert from 'node:assert/strict';
import * as oidc from 'openid-client';

export function env(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run this suite with go test ./deploy/oidcinterop`);
  }
  return value;
}

export const issuer = new URL(env('OIDC_TEST_ISSUER'));
export const audience = env('OIDC_TEST_AUDIENCE');
export const conversationsURL = env('OIDC_TEST_CONVERSATIONS_URL');
/** The user, as the password grant names its fields. */
export const user = {
  username: env('OIDC_TEST_USERNAME'),
  password: env('OIDC_TEST_PASSWORD'),
  account_name: env('OIDC_TEST_ACCOUNT_NAME'),
};

// discover configures a client by discovery. The services run on plain
// HTTP on the loopback, which the library refuses unless told.
export function discover(clientID, clientAuth, metadata = {}) {
  return oidc.discovery(issuer, clientID, metadata, clientAuth, {
    execute: [oidc.allowInsecureRequests, oidc.enableNonRepudiationChecks],
  });
}

/** The cookies of one browser, for the account service's origin. */
export class CookieJar {
  #cookies = new Map();

  /** Keeps the cookies a response sets (an empty value or Max-Age=0 deletes). */
  take(response) {
    for (const line of response.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      const expired = attrs.some((a) => /^\s*max-age\s*=\s*(0|-)/i.test(a));
      if (!value || expired) this.#cookies.delete(name);
      else this.#cookies.set(name, value);
    }
  }

  get header() {
    return [...this.#cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  get size() {
    return this.#cookies.size;
  }
}

/** A GET or POST with the jar's cookies, never following redirects. */
export async function browse(jar, url, init = {}) {
  const headers = new Headers(init.headers);
  if (jar.size) headers.set('Cookie', jar.header);
  const response = await fetch(url, { ...init, headers, redirect: 'manual' });
  jar.take(response);
  return response;
}

const entities = { amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", '#x27': "'" };
function unescape(s) {
  return s.replace(/&(amp|lt|gt|quot|#39|#x27);/g, (_, e) => entities[e]);
}

function attr(tag, name) {
  const m = tag.match(new RegExp(`\\s${name}\\s*=\\s*"([^"]*)"`, 'i'));
  return m ? unescape(m[1]) : undefined;
}

/** The sign-in form of a page: its action (absolute) and hidden fields. */
export function signInForm(html, pageURL) {
  const form = html.match(/<form\b[^>]*>/i);
  assert.ok(form, `the page has a form:\n${html}`);
  assert.equal((attr(form[0], 'method') ?? 'get').toLowerCase(), 'post');
  const action = new URL(attr(form[0], 'action') ?? '', pageURL);
  const hidden = new URLSearchParams();
  for (const [input] of html.matchAll(/<input\b[^>]*>/gi)) {
    if ((attr(input, 'type') ?? '').toLowerCase() === 'hidden') hidden.append(attr(input, 'name'), attr(input, 'value') ?? '');
  }
  for (const field of ['accountName', 'username', 'password']) {
    assert.match(html, new RegExp(`<input\\b[^>]*name="${field}"`), `the form has a field ${field}`);
  }
  return { action, hidden };
}

/**
 * Signs in on the page that authorizeURL shows (GET, then the form
 * POSTed with the user's credentials), following redirects within the
 * account service, and returns the redirect that leaves it (the client's
 * redirect URI with code, state and iss).
 */
export async function signInThroughPage(jar, authorizeURL, user) {
  const page = await browse(jar, authorizeURL);
  assert.equal(page.status, 200, `the authorization request shows the page: ${page.status} ${page.headers.get('location')}`);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  const { action, hidden } = signInForm(await page.text(), authorizeURL);
  const form = new URLSearchParams(hidden);
  form.set('accountName', user.account_name);
  form.set('username', user.username);
  form.set('password', user.password);
  const posted = await browse(jar, action, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', Origin: action.origin },
    body: form,
  });
  return leave(jar, posted, action.origin);
}

/** Follows a response's redirects within origin; returns the URL outside it. */
export async function leave(jar, response, origin) {
  for (let hops = 0; hops < 5; hops++) {
    assert.ok([302, 303].includes(response.status), `a redirect, not ${response.status}: ${await response.text()}`);
    const next = new URL(response.headers.get('location'), origin);
    if (next.origin !== origin) return next;
    response = await browse(jar, next);
  }
  throw new Error('more than 5 redirects within the account service');
}
