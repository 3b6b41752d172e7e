// The authorization code flow with PKCE as an app runs it with
// openid-client, the sign-in page submitted as a browser would; and
// oauth4webapi's validateJwtAccessToken, as a resource server would check
// a user's and a client's access token (RFC 9068).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as oidc from 'openid-client';
import * as oauth from 'oauth4webapi';
import {
  CookieJar,
  audience,
  browse,
  conversationsURL,
  discover,
  env,
  issuer,
  leave,
  signInThroughPage,
  user,
} from '../testsupport/support.js';

const appID = env('OIDC_TEST_APP_CLIENT_ID');
const redirectURI = env('OIDC_TEST_APP_REDIRECT_URI');
const postLogoutURI = env('OIDC_TEST_APP_POST_LOGOUT_URI');
const insecure = { [oauth.allowInsecureRequests]: true };

/** An authorization request of the app, with the checks to redeem its code. */
async function authorization(config, extra = {}) {
  const checks = {
    pkceCodeVerifier: oidc.randomPKCECodeVerifier(),
    expectedState: oidc.randomState(),
    expectedNonce: oidc.randomNonce(),
    idTokenExpected: true,
  };
  const url = oidc.buildAuthorizationUrl(config, {
    redirect_uri: redirectURI,
    scope: 'openid',
    code_challenge: await oidc.calculatePKCECodeChallenge(checks.pkceCodeVerifier),
    code_challenge_method: 'S256',
    state: checks.expectedState,
    nonce: checks.expectedNonce,
    ...extra,
  });
  return { url, checks };
}

/** The resource server's view: oauth4webapi validates a bearer token. */
async function validateAccessToken(token) {
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...insecure }));
  const request = new Request(`${conversationsURL}/v1/conversations`, { headers: { Authorization: `Bearer ${token}` } });
  return oauth.validateJwtAccessToken(as, request, audience, insecure);
}

test('openid-client: code flow with PKCE through the page, id token, userinfo, refresh, logout', async () => {
  const config = await discover(appID, oidc.None(), { token_endpoint_auth_method: 'none' });
  const jar = new CookieJar();
  const { url, checks } = await authorization(config, { account_name: user.account_name });
  const callback = await signInThroughPage(jar, url, user);
  assert.equal(`${callback.origin}${callback.pathname}`, redirectURI);
  assert.equal(callback.searchParams.get('iss'), issuer.href.replace(/\/$/, ''));

  // The library checks state, iss, the id token (signature, iss, aud,
  // azp, nonce, exp, iat) and sends the verifier.
  const tokens = await oidc.authorizationCodeGrant(config, callback, checks);
  const claims = tokens.claims();
  assert.ok(claims.aud === appID || claims.aud.includes(appID), `aud ${claims.aud}`);
  assert.equal(claims.azp, appID);
  assert.equal(claims.nonce, checks.expectedNonce);
  assert.equal(typeof claims.auth_time, 'number');
  assert.deepEqual(claims.amr, ['pwd']);
  assert.equal(claims.preferred_username, user.username);

  const info = await oidc.fetchUserInfo(config, tokens.access_token, claims.sub);
  assert.equal(info.sub, claims.sub);

  // The access token: RFC 9068, naming the app, accepted by the
  // conversations service.
  const at = await validateAccessToken(tokens.access_token);
  assert.equal(at.client_id, appID);
  assert.equal(at.sub, claims.sub);
  const listed = await fetch(`${conversationsURL}/v1/conversations`, { headers: { Authorization: `Bearer ${tokens.access_token}` } });
  assert.equal(listed.status, 200);

  // Refresh: a new token set, the refresh token rotated.
  const refreshed = await oidc.refreshTokenGrant(config, tokens.refresh_token);
  assert.ok(refreshed.access_token);
  assert.notEqual(refreshed.refresh_token, tokens.refresh_token);
  assert.equal(refreshed.claims()?.sub ?? claims.sub, claims.sub);

  // While the browser session lasts, the next authorization needs no page.
  const again = await authorization(config);
  const sso = await leave(jar, await browse(jar, again.url), issuer.origin);
  assert.ok(sso.searchParams.get('code'), `single sign-on redirects with a code: ${sso}`);

  // Logout (RP-initiated): back to the app with its state; the session
  // and the refresh sessions started in it end.
  const state = oidc.randomState();
  const end = oidc.buildEndSessionUrl(config, {
    id_token_hint: refreshed.id_token ?? tokens.id_token,
    post_logout_redirect_uri: postLogoutURI,
    state,
  });
  const back = await leave(jar, await browse(jar, end), issuer.origin);
  assert.equal(`${back.origin}${back.pathname}`, postLogoutURI);
  assert.equal(back.searchParams.get('state'), state);
  await assert.rejects(oidc.refreshTokenGrant(config, refreshed.refresh_token), (err) => err.error === 'invalid_grant');
  const none = await authorization(config, { prompt: 'none' });
  const refused = await leave(jar, await browse(jar, none.url), issuer.origin);
  assert.equal(refused.searchParams.get('error'), 'login_required');
  assert.equal(refused.searchParams.get('state'), none.checks.expectedState);
});

test("oauth4webapi's validateJwtAccessToken accepts a service client's access token", async () => {
  const config = await discover(env('OIDC_TEST_CLIENT_ID'), oidc.ClientSecretBasic(env('OIDC_TEST_CLIENT_SECRET')));
  const tokens = await oidc.clientCredentialsGrant(config);
  const at = await validateAccessToken(tokens.access_token);
  assert.equal(at.client_id, env('OIDC_TEST_CLIENT_ID'));
  assert.equal(at.iss, issuer.href.replace(/\/$/, ''));
});

test('the password grant is refused to an app the operator did not enable it for', async () => {
  const config = await discover(appID, oidc.None(), { token_endpoint_auth_method: 'none' });
  await assert.rejects(oidc.genericGrantRequest(config, 'password', user), (err) => err.error === 'unauthorized_client' && err.status === 400);
});
