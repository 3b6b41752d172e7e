// The sign-in as a user meets it, in one headless Chromium (Debian's,
// through playwright-core): make run's demo app signs in through the page
// and shows the user's conversations, live; a second app then signs in
// without the page (single sign-on); prompt=login shows the page again;
// the page passes axe-core and refuses to be framed; signing out ends the
// single sign-on; a user with a second factor signs in in two steps, the
// second asking for the code only.
import { before, after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import axe from 'axe-core';
import { generate } from 'otplib';
import { chromium } from 'playwright-core';
import { conversationsURL, env, issuer, user } from '../testsupport/support.js';

const demoURL = env('OIDC_TEST_DEMO_APP_URL');
const appID = env('OIDC_TEST_APP_CLIENT_ID');
const redirectURI = env('OIDC_TEST_APP_REDIRECT_URI');
/** The user, as the page and POST /login name the fields. */
const credentials = { accountName: user.account_name, username: user.username, password: user.password };

let context, page, profile;
const consoleErrors = [];

before(async () => {
  profile = await mkdtemp(join(tmpdir(), 'chromium-profile-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: env('CHROMIUM_PATH'),
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  page = await context.newPage();
  page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
});

after(async () => {
  await context?.close();
  if (profile) await rm(profile, { recursive: true, force: true });
});

function base64url(bytes) {
  return Buffer.from(bytes).toString('base64url');
}

/** An authorization request of the web app (PKCE S256), and its state. */
async function webAppAuthorization(extra = {}) {
  const verifier = base64url(crypto.getRandomValues(new Uint8Array(32)));
  const challenge = base64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  const state = base64url(crypto.getRandomValues(new Uint8Array(16)));
  const url = new URL('/oauth2/authorize', issuer);
  for (const [k, v] of Object.entries({
    response_type: 'code',
    client_id: appID,
    redirect_uri: redirectURI,
    scope: 'openid',
    state,
    nonce: state,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    ...extra,
  })) {
    url.searchParams.set(k, v);
  }
  return { url, state, verifier };
}

/** What axe-core finds wrong with the page as the browser shows it. */
async function axeViolations() {
  // Evaluated through the DevTools protocol: the page's policy allows no
  // inline script.
  await page.evaluate(axe.source);
  const results = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return results.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target).join(', ')})`);
}

/** Whether the browser is at the web app's redirect URI. */
const atRedirectURI = (url) => url.href.startsWith(`${redirectURI}?`);

/** Waits until the browser is on the sign-in page. */
async function onSignInPage() {
  await page.locator('input[name="password"]').waitFor();
  assert.equal(new URL(page.url()).origin, issuer.origin);
}

test('the demo app signs in through the page, lists the conversations and follows them live', async () => {
  await page.goto(demoURL);
  const shown = page.waitForResponse(
    (r) => r.request().isNavigationRequest() && r.url().startsWith(issuer.origin) && r.status() === 200,
  );
  await page.getByRole('button', { name: 'Sign in' }).click();
  await onSignInPage();

  // The page as a browser shows it passes axe-core.
  assert.deepEqual(await axeViolations(), []);
  const headers = await (await shown).allHeaders();
  assert.match(headers['content-security-policy'], /frame-ancestors 'none'/);
  assert.doesNotMatch(headers['content-security-policy'], /unsafe-inline/);
  assert.match(headers['cache-control'], /no-store/);
  assert.equal(headers['referrer-policy'], 'no-referrer');

  await page.locator('input[name="accountName"]').fill(credentials.accountName);
  await page.locator('input[name="username"]').fill(user.username);
  await page.locator('input[name="password"]').fill(user.password);
  await page.locator('input[name="password"]').press('Enter');

  await page.locator('#signed-in').waitFor();
  assert.equal(new URL(page.url()).href, `${demoURL}/`);
  assert.equal(await page.locator('#user').textContent(), user.username);
  await page.locator('#events[data-following="true"]').waitFor({ state: 'attached' });

  // A conversation started elsewhere (the same user, POST /login) shows
  // up live: in the event list and in the conversations.
  const login = await fetch(`${issuer.origin}/login`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(credentials),
  });
  assert.equal(login.status, 200);
  const bearer = (await login.json()).tokens.id_token;
  const created = await fetch(`${conversationsURL}/v1/conversations`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ subject: 'seen live in the demo app' }),
  });
  assert.equal(created.status, 201);
  const { id } = await created.json();
  await page.locator('#events li[data-type="conversation.created"]').first().waitFor();
  await page.locator(`#conversations li[data-id="${id}"]`).waitFor();
  assert.equal(await page.locator('#error').isHidden(), true, await page.locator('#error').textContent());
});

test('a second app signs in without the page while the session lasts; prompt=login shows it', async () => {
  const sso = await webAppAuthorization();
  const shown = [];
  const watch = (r) => r.url().startsWith(issuer.origin) && r.headers()['content-type']?.startsWith('text/html') && shown.push(r.url());
  page.on('response', watch);
  await page.goto(sso.url.href);
  await page.waitForURL(atRedirectURI);
  page.off('response', watch);
  const callback = new URL(page.url());
  assert.ok(callback.searchParams.get('code'), `no code in ${callback}`);
  assert.equal(callback.searchParams.get('state'), sso.state);
  assert.equal(callback.searchParams.get('iss'), issuer.href.replace(/\/$/, ''));
  assert.deepEqual(shown, [], 'single sign-on showed a page');

  // The code is the app's: redeemed with its verifier.
  const token = await exchange(callback.searchParams.get('code'), sso.verifier);
  assert.equal(token.status, 200, await token.clone().text());
  assert.ok((await token.json()).id_token);

  const fresh = await webAppAuthorization({ prompt: 'login' });
  await page.goto(fresh.url.href);
  await onSignInPage();

  // On a phone, a failed sign-in: the page again, with one message, still
  // without axe-core violations and without scrolling sideways.
  await page.setViewportSize({ width: 360, height: 640 });
  try {
    await page.locator('input[name="accountName"]').fill(credentials.accountName);
    await page.locator('input[name="username"]').fill(user.username);
    await page.locator('input[name="password"]').fill(`not ${user.password}`);
    await page.locator('input[name="password"]').press('Enter');
    await page.getByRole('alert').waitFor();
    await onSignInPage();
    assert.deepEqual(await axeViolations(), []);
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the page scrolls sideways on a phone');
  } finally {
    await page.setViewportSize({ width: 1280, height: 720 });
  }
});

test('the sign-in page refuses to be framed by another site', async () => {
  // A page of another origin (the test's server) frames the sign-in page:
  // the service answers, the browser shows nothing of it.
  const framed = async (src) => {
    await page.goto(`${demoURL}/framer?src=${encodeURIComponent(src)}`); // waits for the frame's load too
    const frame = page.frames().find((f) => f.parentFrame() === page.mainFrame());
    assert.ok(frame, 'the iframe exists');
    return frame;
  };
  // A page without frame-ancestors shows in that frame.
  assert.equal(await (await framed(redirectURI)).title(), 'web app');

  const signIn = (await webAppAuthorization({ prompt: 'login' })).url.href;
  const answered = page.waitForResponse((r) => r.url() === signIn);
  const frame = await framed(signIn);
  assert.equal((await answered).status(), 200);
  assert.equal(await frame.locator('input[name="password"]').count(), 0, 'the sign-in form was shown in the frame');
});

test('signing out of the demo app ends the single sign-on', async () => {
  await page.goto(demoURL);
  await page.locator('#signed-in').waitFor();
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.locator('#signed-out').waitFor();
  assert.equal(await page.locator('#status').textContent(), 'Signed out.');

  const none = await webAppAuthorization({ prompt: 'none' });
  await page.goto(none.url.href);
  await page.waitForURL(atRedirectURI);
  assert.equal(new URL(page.url()).searchParams.get('error'), 'login_required');
  const again = await webAppAuthorization();
  await page.goto(again.url.href);
  await onSignInPage();

  assert.deepEqual(consoleErrors.filter((m) => /CORS|Access-Control/i.test(m)), []);
});

/** The TOTP code (RFC 6238, otplib) of secret `steps` 30-second steps from now. */
const totp = (secret, steps = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + 30 * steps });

/** Exchanges a code of the web app for its token response. */
function exchange(code, verifier) {
  return fetch(`${issuer.origin}/oauth2/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code,
      redirect_uri: redirectURI,
      client_id: appID,
      code_verifier: verifier,
    }),
  });
}

test('a user with a second factor signs in in two steps, the second asking for the code only', async () => {
  const mfaUser = { accountName: user.account_name, username: env('OIDC_TEST_MFA_USERNAME'), password: env('OIDC_TEST_MFA_PASSWORD') };
  // The user enrols a TOTP with their own token.
  const login = await fetch(`${issuer.origin}/login`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(mfaUser),
  });
  assert.equal(login.status, 200, await login.clone().text());
  const auth = { Authorization: `Bearer ${(await login.json()).tokens.access_token}`, 'Content-Type': 'application/json' };
  const begun = await fetch(`${issuer.origin}/mfa/totp`, { method: 'POST', headers: auth });
  assert.equal(begun.status, 200, await begun.clone().text());
  const { secret } = await begun.json();
  const verified = await fetch(`${issuer.origin}/mfa/totp/verify`, { method: 'POST', headers: auth, body: JSON.stringify({ code: await totp(secret, 0) }) });
  assert.equal(verified.status, 200, await verified.clone().text());

  const flow = await webAppAuthorization({ prompt: 'login' });
  await page.goto(flow.url.href);
  await onSignInPage();
  await page.locator('input[name="accountName"]').fill(mfaUser.accountName);
  await page.locator('input[name="username"]').fill(mfaUser.username);
  await page.locator('input[name="password"]').fill(mfaUser.password);
  await page.locator('input[name="password"]').press('Enter');

  // The second step: the code only, on the service's page, accessible.
  const code = page.getByLabel('Code');
  await code.waitFor();
  assert.equal(new URL(page.url()).origin, issuer.origin);
  assert.equal(await page.locator('input[name="password"]').count(), 0, 'the second step asks for the password again');
  assert.equal(await page.locator('input[name="username"]').count(), 0);
  assert.deepEqual(await axeViolations(), []);
  assert.ok(!(await page.content()).includes(mfaUser.password), 'the second step holds the password');

  // The activation spent this step's code: the next one signs in.
  await code.fill(await totp(secret, 1));
  await code.press('Enter');
  await page.waitForURL(atRedirectURI);
  const callback = new URL(page.url());
  assert.equal(callback.searchParams.get('state'), flow.state);
  const token = await exchange(callback.searchParams.get('code'), flow.verifier);
  assert.equal(token.status, 200, await token.clone().text());
  const idToken = (await token.json()).id_token;
  const claims = JSON.parse(Buffer.from(idToken.split('.')[1], 'base64url').toString());
  assert.equal(claims.preferred_username ?? mfaUser.username, mfaUser.username);
  assert.deepEqual(claims.amr, ['pwd', 'otp']);
});
