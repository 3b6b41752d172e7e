import { ApiError } from "./errors.js";

/** A user's credentials: POST /login. */
export interface PasswordCredentials {
  accountName: string;
  username: string;
  password: string;
}

/**
 * A service client's credentials: POST /oauth2/token with the
 * client_credentials grant. scope, space-separated, may narrow the client's
 * scopes.
 */
export interface ClientCredentials {
  clientId: string;
  clientSecret: string;
  scope?: string | undefined;
}

/**
 * An app that signs its user in itself (the authorization code flow with
 * an OpenID Connect library) hands over its access token: accessToken is
 * called before each request, with renew true after a service refused the
 * previous token, and returns a current access token (the library's, which
 * renews it with its refresh token).
 */
export interface TokenCredentials {
  accessToken: (options: { renew: boolean }) => Promise<string> | string;
}

export type Credentials = PasswordCredentials | ClientCredentials | TokenCredentials;

/** How the session got its current tokens. */
export type RenewalKind = "login" | "refresh" | "client_credentials";

/** The largest margin before expiry at which tokens are renewed. */
const maxRenewMarginMs = 60_000;

/** Renew a tenth of the lifetime before expiry, at most a minute before. */
export function renewMarginMs(lifetimeMs: number): number {
  return Math.min(maxRenewMarginMs, lifetimeMs / 10);
}

interface Tokens {
  bearer: string;
  refresh: string | undefined;
  renewAt: number; // ms since the epoch
}

export interface Bearer {
  token: string;
  generation: number;
}

type Fetch = typeof globalThis.fetch;

/**
 * The tokens of one principal and their renewal: one renewal at a time,
 * which every concurrent caller waits for. Credentials and tokens live in
 * private fields: no inspection, JSON or string form shows them.
 */
export class Session {
  readonly #accountUrl: string;
  #credentials: Credentials;
  readonly #fetch: Fetch;
  readonly #onRenew: ((kind: RenewalKind) => void) | undefined;
  readonly #now: () => number;
  #tokens: Tokens | undefined;
  #stale = false;
  #generation = 0;
  #flight: Promise<Bearer> | undefined;
  #flightIsLogin = false;

  constructor(accountUrl: string, credentials: Credentials, fetch: Fetch, onRenew?: (kind: RenewalKind) => void, now?: () => number) {
    this.#accountUrl = accountUrl;
    this.#credentials = { ...credentials };
    this.#fetch = fetch;
    this.#onRenew = onRenew;
    this.#now = now ?? Date.now;
  }

  get kind(): "password" | "client_credentials" | "token" {
    const c = this.#credentials;
    return "clientId" in c ? "client_credentials" : "accessToken" in c ? "token" : "password";
  }

  /** A bearer token that does not expire within the margin. */
  async bearer(): Promise<Bearer> {
    const c = this.#credentials;
    if ("accessToken" in c) {
      const renew = this.#stale;
      const token = await c.accessToken({ renew });
      if (typeof token !== "string" || token === "") throw new Error("credentials: accessToken() returned no token");
      if (renew) {
        this.#stale = false;
        this.#generation++;
      }
      return { token, generation: this.#generation };
    }
    const t = this.#tokens;
    if (t && !this.#stale && this.#now() < t.renewAt) {
      return { token: t.bearer, generation: this.#generation };
    }
    // The renewal's result is used as is, even when the clock says it is
    // already due: tokens of a few seconds must not renew in a loop.
    return this.#renew(false);
  }

  /** Logs in with the credentials, after any renewal in progress. */
  async login(): Promise<void> {
    if ("accessToken" in this.#credentials) {
      await this.bearer();
      return;
    }
    for (;;) {
      const flight = this.#flight;
      if (!flight) {
        await this.#renew(true);
        return;
      }
      const wasLogin = this.#flightIsLogin;
      await flight.catch(() => undefined);
      if (wasLogin) {
        await flight;
        return;
      }
    }
  }

  /**
   * Logs in with the credentials and a code of the user's second factor,
   * after any renewal in progress; a later login needs a new code.
   */
  async loginWithOtp(otp: string, signal?: AbortSignal): Promise<void> {
    await this.#flight?.catch(() => undefined);
    const c = this.#credentials;
    if ("clientId" in c) throw new TypeError("loginWithOtp: a service client has no second factor");
    if ("accessToken" in c) throw new TypeError("loginWithOtp: an app that signs its user in itself gives no password here");
    this.#tokens = await this.#passwordLogin(c, otp, signal);
    this.#stale = false;
    this.#generation++;
  }

  /**
   * Takes the token set of a password change (the answer of POST
   * /password, requested at start) as the session's, and the new password
   * for later logins.
   */
  adopt(start: number, body: unknown, newPassword: string): void {
    const tokens = userTokens(start, body);
    if ("password" in this.#credentials) this.#credentials = { ...this.#credentials, password: newPassword };
    this.#tokens = tokens;
    this.#stale = false;
    this.#generation++;
  }

  /** Records that a service refused the tokens of generation g. */
  invalidate(g: number): void {
    if (g === this.#generation) this.#stale = true;
  }

  /**
   * Ends the session: revokes the refresh token (POST /logout) and forgets
   * the tokens. Already issued id and access tokens stay valid until they
   * expire.
   */
  async logout(signal?: AbortSignal): Promise<void> {
    await this.#flight?.catch(() => undefined);
    const refresh = this.#tokens?.refresh;
    this.#tokens = undefined;
    this.#generation++;
    if (refresh) {
      await this.#post("/logout", JSON.stringify({ refresh_token: refresh }), "application/json", signal);
    }
  }

  #renew(forceLogin: boolean): Promise<Bearer> {
    if (this.#flight) return this.#flight;
    const refresh = forceLogin ? undefined : this.#tokens?.refresh;
    this.#flightIsLogin = refresh === undefined;
    let flight: Promise<Bearer> | undefined = undefined;
    flight = (async (): Promise<Bearer> => {
      try {
        let kind: RenewalKind;
        let tokens: Tokens;
        if (refresh !== undefined) {
          try {
            tokens = await this.#refresh(refresh);
            kind = "refresh";
          } catch (err) {
            // A spent, revoked or expired refresh token (401), or no
            // refresh endpoint (404): log in again. Anything else (503,
            // the network) fails this call; the next call tries again.
            if (!(err instanceof ApiError) || (err.status !== 401 && err.status !== 404)) throw err;
            ({ tokens, kind } = await this.#authenticate());
          }
        } else {
          ({ tokens, kind } = await this.#authenticate());
        }
        this.#tokens = tokens;
        this.#stale = false;
        this.#generation++;
        try {
          this.#onRenew?.(kind);
        } catch {
          // An observer's failure must not fail the renewal it observes.
        }
        return { token: tokens.bearer, generation: this.#generation };
      } finally {
        if (this.#flight === flight) this.#flight = undefined;
      }
    })();
    this.#flight = flight;
    return flight;
  }

  async #authenticate(): Promise<{ tokens: Tokens; kind: RenewalKind }> {
    const c = this.#credentials;
    if ("accessToken" in c) throw new Error("unreachable: an app's tokens are renewed by the app");
    const start = this.#now(); // expires_in counts from the response: earlier is safe
    if ("clientId" in c) {
      const form = new URLSearchParams({ grant_type: "client_credentials", client_id: c.clientId, client_secret: c.clientSecret });
      if (c.scope) form.set("scope", c.scope);
      const body = await this.#post("/oauth2/token", form.toString(), "application/x-www-form-urlencoded");
      const token = field(body, "access_token");
      return { tokens: { bearer: token, refresh: undefined, renewAt: renewAt(start, body) }, kind: "client_credentials" };
    }
    return { tokens: await this.#passwordLogin(c), kind: "login" };
  }

  /** POST /login with the user's credentials and otp, a code of their second factor. */
  async #passwordLogin(c: PasswordCredentials, otp?: string, signal?: AbortSignal): Promise<Tokens> {
    const start = this.#now(); // expires_in counts from the response: earlier is safe
    const login = { username: c.username, password: c.password, accountName: c.accountName };
    const body = await this.#post("/login", JSON.stringify(otp === undefined ? login : { ...login, otp }), "application/json", signal);
    return userTokens(start, body);
  }

  async #refresh(refresh: string): Promise<Tokens> {
    const start = this.#now();
    const body = await this.#post("/token/refresh", JSON.stringify({ refresh_token: refresh }), "application/json");
    return userTokens(start, body);
  }

  /** POSTs to the account service; returns the JSON body, or undefined for 204. */
  async #post(path: string, body: string, contentType: string, signal?: AbortSignal): Promise<unknown> {
    const url = this.#accountUrl + path;
    const res = await this.#fetch(url, {
      method: "POST",
      headers: { "Content-Type": contentType, Accept: "application/json" },
      body,
      signal: signal ?? null,
      credentials: "omit",
    });
    if (!res.ok) throw await ApiError.fromResponse(res, "POST");
    if (res.status === 204) return undefined;
    return res.json();
  }
}

function field(body: unknown, name: string): string {
  const v = (body as Record<string, unknown> | undefined)?.[name];
  if (typeof v !== "string" || v === "") throw new Error(`token response has no ${name}`);
  return v;
}

function renewAt(start: number, body: unknown): number {
  const expiresIn = (body as Record<string, unknown> | undefined)?.["expires_in"];
  if (typeof expiresIn !== "number" || !(expiresIn > 0)) throw new Error("token response has no positive expires_in");
  const lifetime = expiresIn * 1000;
  return start + lifetime - renewMarginMs(lifetime);
}

function userTokens(start: number, body: unknown): Tokens {
  const set = (body as Record<string, unknown> | undefined)?.["tokens"];
  return { bearer: field(set, "id_token"), refresh: field(set, "refresh_token"), renewAt: renewAt(start, set) };
}
