// openid-client (and oauth4webapi under it) against the real account
// service, as an app or backend would use it. Run by go test
// ./deploy/oidcinterop, which starts the services and sets the
// environment (see doc.go). The library validates every id token itself:
// iss, aud (must contain the client id), azp, exp, iat, and, with
// enableNonRepudiationChecks, the signature against discovery's jwks_uri.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as oidc from 'openid-client';
import { audience, conversationsURL, discover, env, issuer, user } from '../testsupport/support.js';

const confidentialID = env('OIDC_TEST_CLIENT_ID');
const confidentialSecret = env('OIDC_TEST_CLIENT_SECRET');
const publicID = env('OIDC_TEST_PUBLIC_CLIENT_ID');

const clients = {
  public: () => discover(publicID, oidc.None(), { token_endpoint_auth_method: 'none' }),
  'confidential (client_secret_post)': () => discover(confidentialID, oidc.ClientSecretPost(confidentialSecret)),
  'confidential (client_secret_basic)': () => discover(confidentialID, oidc.ClientSecretBasic(confidentialSecret)),
};

// checkIDToken checks what the library validated: the id token names the
// client in aud (beside the platform) and azp.
function checkIDToken(tokens, clientID) {
  const claims = tokens.claims();
  assert.ok(claims, 'the response has an id token');
  assert.equal(claims.iss, issuer.href.replace(/\/$/, ''));
  assert.deepEqual([...claims.aud].sort(), [audience, clientID].sort());
  assert.equal(claims.azp, clientID);
  assert.equal(claims.preferred_username, user.username);
  assert.equal(typeof claims.auth_time, 'number');
  return claims;
}

// conversationsStatus calls the conversations service with a bearer.
async function conversationsStatus(bearer) {
  const response = await fetch(`${conversationsURL}/v1/conversations`, {
    headers: { authorization: `Bearer ${bearer}` },
  });
  await response.arrayBuffer();
  return response.status;
}

async function rejectsWith(promise, code, status) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof oidc.ResponseBodyError, `${err.name}: ${err.message}`);
    assert.equal(err.error, code);
    assert.equal(err.status, status);
    return true;
  });
}

test('discovery names the endpoints and methods the clients use', async () => {
  const config = await clients.public();
  const meta = config.serverMetadata();
  assert.equal(meta.token_endpoint, new URL('/oauth2/token', issuer).href);
  assert.equal(meta.revocation_endpoint, new URL('/oauth2/revoke', issuer).href);
  assert.equal(meta.jwks_uri, new URL('/.well-known/jwks.json', issuer).href);
  for (const method of ['client_secret_basic', 'client_secret_post', 'none']) {
    assert.ok(meta.token_endpoint_auth_methods_supported.includes(method), method);
  }
  assert.deepEqual([...meta.grant_types_supported].sort(), ['authorization_code', 'client_credentials', 'password', 'refresh_token']);
  assert.equal(meta.authorization_endpoint, new URL('/oauth2/authorize', issuer).href);
  assert.equal(meta.end_session_endpoint, new URL('/oauth2/logout', issuer).href);
  assert.deepEqual(meta.code_challenge_methods_supported, ['S256']);
  assert.equal(meta.authorization_response_iss_parameter_supported, true);
});

for (const [name, configure] of Object.entries(clients)) {
  test(`${name} client: password grant, refresh, revocation`, async () => {
    const config = await configure();
    const clientID = config.clientMetadata().client_id;
    const tokens = await oidc.genericGrantRequest(config, 'password', user);
    assert.equal(tokens.token_type, 'bearer');
    assert.ok(tokens.refresh_token);
    const first = checkIDToken(tokens, clientID);
    // The conversations service accepts the id token (its verifier wants
    // the platform audience) and the access token.
    assert.equal(await conversationsStatus(tokens.id_token), 200);
    assert.equal(await conversationsStatus(tokens.access_token), 200);

    const renewed = await oidc.refreshTokenGrant(config, tokens.refresh_token);
    const again = checkIDToken(renewed, clientID);
    assert.equal(again.sub, first.sub);
    assert.equal(again.sid, first.sid);
    assert.notEqual(renewed.refresh_token, tokens.refresh_token);
    assert.equal(await conversationsStatus(renewed.id_token), 200);

    await oidc.tokenRevocation(config, renewed.refresh_token, { token_type_hint: 'refresh_token' });
    await rejectsWith(oidc.refreshTokenGrant(config, renewed.refresh_token), 'invalid_grant', 400);
  });
}

test('a wrong password is invalid_grant', async () => {
  const config = await clients.public();
  await rejectsWith(oidc.genericGrantRequest(config, 'password', { ...user, password: `${user.password}-wrong` }), 'invalid_grant', 400);
});

test('a refresh token is bound to the client it was issued to', async () => {
  const [pub, conf] = await Promise.all([clients.public(), clients['confidential (client_secret_post)']()]);
  const tokens = await oidc.genericGrantRequest(pub, 'password', user);
  await rejectsWith(oidc.refreshTokenGrant(conf, tokens.refresh_token), 'invalid_grant', 400);
  // The refusal spent nothing: the public client still refreshes.
  checkIDToken(await oidc.refreshTokenGrant(pub, tokens.refresh_token), publicID);
});

test('client credentials: a confidential client gets an access token', async () => {
  const config = await clients['confidential (client_secret_basic)']();
  const tokens = await oidc.clientCredentialsGrant(config, { scope: 'conversations:read definitions:read' });
  assert.equal(tokens.token_type, 'bearer');
  assert.equal(tokens.scope, 'conversations:read definitions:read');
  assert.equal(tokens.id_token, undefined);
  assert.equal(tokens.refresh_token, undefined);
  assert.equal(await conversationsStatus(tokens.access_token), 200);
});

test('client credentials: a public client is unauthorized_client', async () => {
  await rejectsWith(oidc.clientCredentialsGrant(await clients.public()), 'unauthorized_client', 400);
});

test('a wrong secret sent in the body is invalid_client, without a challenge', async () => {
  const config = await discover(confidentialID, oidc.ClientSecretPost('cs_wrong'));
  await rejectsWith(oidc.clientCredentialsGrant(config), 'invalid_client', 401);
});

test('a public client that sends a secret is invalid_client', async () => {
  const config = await discover(publicID, oidc.ClientSecretPost('cs_anything'));
  await rejectsWith(oidc.genericGrantRequest(config, 'password', user), 'invalid_client', 401);
});
