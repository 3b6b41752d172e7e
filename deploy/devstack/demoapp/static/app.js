// The demo app: signs its user in with the authorization code flow and
// PKCE through oauth4webapi, lists the user's conversations with the
// platform's JavaScript client and follows their live event stream. The
// tokens live in sessionStorage (this tab only); the access token goes to
// the JavaScript client, which asks for it before each call.
import * as oauth from "/vendor/oauth4webapi.js";
import { PlatformClient } from "/client/index.js";

const $ = (id) => document.getElementById(id);
const redirectUri = location.origin + "/callback";
const postLogoutRedirectUri = location.origin + "/";
// http is allowed for the local stack's loopback addresses only.
const insecure = { [oauth.allowInsecureRequests]: true };
const store = {
  get: (k) => JSON.parse(sessionStorage.getItem("demo." + k) ?? "null"),
  set: (k, v) => sessionStorage.setItem("demo." + k, JSON.stringify(v)),
  drop: (k) => sessionStorage.removeItem("demo." + k),
};

function show(message, isError = false) {
  $("status").textContent = isError ? "" : message;
  $("error").hidden = !isError;
  $("error").textContent = isError ? message : "";
}

async function discover(issuer) {
  const url = new URL(issuer);
  return oauth.processDiscoveryResponse(url, await oauth.discoveryRequest(url, { algorithm: "oidc", ...insecure }));
}

async function signIn(as, client, cfg) {
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const nonce = oauth.generateRandomNonce();
  store.set("pending", { verifier, state, nonce });
  const url = new URL(as.authorization_endpoint);
  url.searchParams.set("response_type", "code");
  url.searchParams.set("client_id", client.client_id);
  url.searchParams.set("redirect_uri", redirectUri);
  url.searchParams.set("scope", "openid");
  url.searchParams.set("state", state);
  url.searchParams.set("nonce", nonce);
  url.searchParams.set("code_challenge", await oauth.calculatePKCECodeChallenge(verifier));
  url.searchParams.set("code_challenge_method", "S256");
  if (cfg.accountName) url.searchParams.set("account_name", cfg.accountName);
  location.assign(url);
}

/** Redeems the code of the callback URL; the tokens go to sessionStorage. */
async function completeSignIn(as, client) {
  const current = new URL(location.href);
  const pending = store.get("pending");
  store.drop("pending");
  history.replaceState(null, "", "/");
  if (!pending) throw new Error("no sign-in was started in this tab");
  const params = oauth.validateAuthResponse(as, client, current, pending.state);
  const response = await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), params, redirectUri, pending.verifier, insecure);
  const result = await oauth.processAuthorizationCodeResponse(as, client, response, { expectedNonce: pending.nonce, requireIdToken: true });
  keep(result);
}

function keep(result, previous) {
  const claims = oauth.getValidatedIdTokenClaims(result);
  store.set("tokens", {
    accessToken: result.access_token,
    refreshToken: result.refresh_token ?? previous?.refreshToken,
    idToken: result.id_token ?? previous?.idToken,
    claims: claims ?? previous?.claims,
    expiresAt: Date.now() + (result.expires_in ?? 60) * 1000,
  });
}

let refreshing;
/** The current access token, refreshed when due or when renew asks. */
async function accessToken(as, client, renew) {
  const t = store.get("tokens");
  if (!t) throw new Error("signed out");
  if (!renew && Date.now() < t.expiresAt - 30_000) return t.accessToken;
  refreshing ??= (async () => {
    try {
      const response = await oauth.refreshTokenGrantRequest(as, client, oauth.None(), t.refreshToken, insecure);
      keep(await oauth.processRefreshTokenResponse(as, client, response), t);
    } finally {
      refreshing = undefined;
    }
  })();
  await refreshing;
  return store.get("tokens").accessToken;
}

function signOut(as, client) {
  const t = store.get("tokens");
  const state = oauth.generateRandomState();
  store.drop("tokens");
  store.set("logout", state);
  const url = new URL(as.end_session_endpoint);
  if (t?.idToken) url.searchParams.set("id_token_hint", t.idToken);
  url.searchParams.set("client_id", client.client_id);
  url.searchParams.set("post_logout_redirect_uri", postLogoutRedirectUri);
  url.searchParams.set("state", state);
  location.assign(url);
}

function item(list, text, id) {
  const li = document.createElement("li");
  li.textContent = text;
  if (id) li.dataset.id = id;
  list.append(li);
  return li;
}

async function showConversations(api) {
  const list = $("conversations");
  list.replaceChildren();
  for await (const c of api.conversations({ limit: 50 })) item(list, `${c.subject ?? "(no subject)"} · ${c.status}`, c.id);
  if (!list.children.length) item(list, "No conversations yet.");
}

/** Follows the live stream from the present on, newest first. */
async function followEvents(api) {
  const feed = api.events({ limit: 1000 });
  for await (const _ of feed);
  const list = $("events");
  list.dataset.following = "true";
  for await (const e of api.streamEvents({ after: feed.position ?? 0 })) {
    const li = item(list, `${e.type} ${e.data?.conversation?.id ?? ""}`, e.id);
    li.dataset.type = e.type;
    list.prepend(li);
    if (e.type.startsWith("conversation.")) await showConversations(api);
  }
}

async function main() {
  const cfg = await (await fetch("/config.json")).json();
  const as = await discover(cfg.issuer);
  const client = { client_id: cfg.clientId };
  const here = new URL(location.href);
  if (here.pathname === "/callback") await completeSignIn(as, client);
  if (here.searchParams.has("state") && store.get("logout") === here.searchParams.get("state")) {
    store.drop("logout");
    history.replaceState(null, "", "/");
    $("status").dataset.signedOut = "true";
  }
  const tokens = store.get("tokens");
  if (!tokens) {
    $("signed-out").hidden = false;
    $("sign-in").addEventListener("click", () => signIn(as, client, cfg).catch((err) => show(err.message, true)));
    show($("status").dataset.signedOut ? "Signed out." : "Not signed in.");
    return;
  }
  $("signed-in").hidden = false;
  $("user").textContent = tokens.claims?.preferred_username ?? tokens.claims?.sub ?? "";
  $("account").textContent = tokens.claims?.account_name ?? "";
  $("sign-out").addEventListener("click", () => signOut(as, client));
  const api = new PlatformClient({
    accountUrl: cfg.issuer,
    conversationsUrl: cfg.conversationsUrl,
    credentials: { accessToken: ({ renew }) => accessToken(as, client, renew) },
  });
  await showConversations(api);
  show("Signed in.");
  await followEvents(api);
}

main().catch((err) => show(err.message ?? String(err), true));
