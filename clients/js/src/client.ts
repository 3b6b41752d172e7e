import { delay } from "./delay.js";
import { ApiError } from "./errors.js";
import { EventFeed, EventStream, defaultEventPageSize, positionOf, type EventPage } from "./events.js";
import { nextLink } from "./link.js";
import { Session, type Credentials, type RenewalKind } from "./session.js";
import type {
  Conversation,
  ConversationPatch,
  ConversationStatus,
  Definition,
  EventType,
  Message,
  NewConversation,
  NewMessage,
  PlatformEvent,
  CreatedWebhook,
  NewWebhook,
  Webhook,
  WebhookDelivery,
  WebhookPatch,
  NewUser,
  User,
  UserInfo,
  TotpEnrollment,
  UserPatch,
} from "./types.js";

/** Configures a {@link PlatformClient}. */
export interface ClientOptions {
  /** Base URL of the account service, e.g. `http://localhost:8080`. */
  accountUrl: string;
  /** Base URL of the conversations service, e.g. `http://localhost:8081`. */
  conversationsUrl: string;
  /**
   * A user's `{ accountName, username, password }`, a service client's
   * `{ clientId, clientSecret, scope? }`, or an app's `{ accessToken }`: a
   * function returning the access token of its user's sign-in.
   */
  credentials: Credentials;
  /** The fetch to use; default the global one (Node 20+, browsers). */
  fetch?: typeof globalThis.fetch | undefined;
  /** Called after every login and renewal, with how it was done (for metrics). */
  onRenew?: ((kind: RenewalKind) => void) | undefined;
  /**
   * How many times a read, or a creation with its `Idempotency-Key`, is
   * sent again after a network failure, a 502, 503 or 504, or a 429
   * (default 2; 0 turns retries off). See "Retries" in the top-level README.
   */
  maxRetries?: number | undefined;
  /**
   * The longest wait, in seconds, before a retry (default 10): an answer
   * whose `Retry-After` asks for longer is thrown at once.
   */
  maxRetryWait?: number | undefined;
}

/** Per-call options. */
export interface CallOptions {
  /** Aborts the call. */
  signal?: AbortSignal | undefined;
}

/** Options of a creating call. */
export interface CreateOptions extends CallOptions {
  /**
   * The `Idempotency-Key`: a retry with the same key and body within 24
   * hours returns the first response and creates nothing. Default: a new
   * random key per call.
   */
  idempotencyKey?: string | undefined;
}

/** Options of {@link PlatformClient.updateConversation}. */
export interface UpdateOptions extends CallOptions {
  /** The `If-Match` to send; default the last ETag this client saw of the conversation. */
  ifMatch?: string | undefined;
}

/** Filters and page size of the conversation listing. */
export interface ListConversationsOptions extends CallOptions {
  /** Page size, 1..100 (the service's default is 10). */
  limit?: number | undefined;
  status?: ConversationStatus | undefined;
  /** Only conversations changed after this instant. */
  updatedAfter?: Date | string | undefined;
}

/** Page size and filter of the user listing (a service client with `users:read`). */
export interface ListUsersOptions extends CallOptions {
  /** Page size, 1..100 (the service's default is 10). */
  limit?: number | undefined;
  /** Only the user of this username (an exact, case-insensitive match). */
  username?: string | undefined;
}

/** Page size of the message listing. */
export interface ListMessagesOptions extends CallOptions {
  limit?: number | undefined;
}

/** Where the event feed starts, what it returns, and how much per page. */
export interface EventsOptions extends CallOptions {
  /** Only events with a greater `sequence` (a stored position); default: from the oldest kept. */
  after?: number | undefined;
  /** Page size, 1..1000 (the service's default is 100). */
  limit?: number | undefined;
  /** Only events of these types. */
  types?: EventType[] | undefined;
}

/** Where the live stream starts and what it sends. */
export interface StreamEventsOptions extends CallOptions {
  /** Only events with a greater `sequence` (a stored position); default: the service's. */
  after?: number | undefined;
  /** Only events of these types. */
  types?: EventType[] | undefined;
}

/** One page of a listing and the link to the next, if any. */
/** Options of {@link PlatformClient.rotateWebhookSecret}. */
export interface RotateOptions extends CallOptions {
  /** Seconds the previous secret keeps signing (0..604800); the service's default (24 h) when left out. */
  overlapSeconds?: number | undefined;
}

export interface Page<T> {
  items: T[];
  /** The next page's URL (absolute); undefined on the last page. */
  next: string | undefined;
}

/** How many conversations' ETags a client remembers. */
const maxRememberedETags = 1000;

/** Statuses after which a read or an idempotency-keyed creation is retried. */
const retryStatuses = new Set([429, 502, 503, 504]);

/**
 * The client of the account and conversations services for one principal:
 * a user (username, password, account name) or a service client (client
 * credentials). It logs in on first use and renews its tokens before they
 * expire; create one per principal and keep it.
 */
export class PlatformClient {
  readonly accountUrl: string;
  readonly conversationsUrl: string;
  readonly #session: Session;
  readonly #fetch: typeof globalThis.fetch;
  readonly #etags = new Map<string, string>();
  readonly #maxRetries: number;
  readonly #maxRetryWait: number;

  constructor(options: ClientOptions) {
    this.#maxRetries = options.maxRetries ?? 2;
    this.#maxRetryWait = options.maxRetryWait ?? 10;
    if (!(Number.isInteger(this.#maxRetries) && this.#maxRetries >= 0) || !(this.#maxRetryWait >= 0)) {
      throw new TypeError("maxRetries must be a whole number and maxRetryWait a number of seconds, neither negative");
    }
    this.accountUrl = baseUrl(options.accountUrl, "accountUrl");
    this.conversationsUrl = baseUrl(options.conversationsUrl, "conversationsUrl");
    // A browser's fetch must be called on the global object.
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#session = new Session(this.accountUrl, checkCredentials(options.credentials), this.#fetch, options.onRenew);
  }

  /**
   * Logs in now (optional: the first call logs in by itself). Useful to
   * check the credentials at start-up: an {@link ApiError} with code
   * `invalid_credentials` (user) or `invalid_client` (service client).
   */
  login(): Promise<void> {
    return this.#session.login();
  }

  /**
   * Logs in with a code of the user's second factor (a current TOTP code
   * or an unused recovery code), after a call failed with a
   * {@link MfaRequiredError}. A code is accepted once; a wrong one is an
   * {@link ApiError} `invalid_credentials`, as a wrong password is.
   */
  loginWithOtp(otp: string, options: CallOptions = {}): Promise<void> {
    return this.#session.loginWithOtp(otp, options.signal);
  }

  /** Revokes the session's refresh token and forgets the tokens. */
  logout(options: CallOptions = {}): Promise<void> {
    return this.#session.logout(options.signal);
  }

  /** The integration definitions of the caller's account. */
  async listDefinitions(options: CallOptions = {}): Promise<Definition[]> {
    const res = await this.#call("GET", this.accountUrl + "/definitions", options);
    return res.json();
  }

  /** One page of conversations; `next` is the URL of the following one. */
  async listConversationsPage(options: ListConversationsOptions & { page?: string | undefined } = {}): Promise<Page<Conversation>> {
    return this.#listPage(() => this.#listUrl(options), options);
  }

  /**
   * Every conversation of the caller (for a service client: of its
   * account), newest activity first, fetching page after page by following
   * the `Link: rel="next"` header.
   */
  async *conversations(options: ListConversationsOptions = {}): AsyncGenerator<Conversation, void, undefined> {
    yield* this.#everyItem(this.#listUrl(options), (page) => this.listConversationsPage({ ...options, page }));
  }

  /** A conversation; remembers its ETag for the next update. */
  async getConversation(id: string, options: CallOptions = {}): Promise<Conversation> {
    const res = await this.#call("GET", this.#conversationUrl(id), options);
    this.#rememberETag(id, res);
    return res.json();
  }

  /**
   * Creates a conversation, with an `Idempotency-Key` (generated unless
   * given): retrying the call with the same key cannot create a second one.
   */
  async createConversation(input: NewConversation = {}, options: CreateOptions = {}): Promise<Conversation> {
    const res = await this.#call("POST", this.conversationsUrl + "/v1/conversations", options, {
      body: JSON.stringify(input),
      contentType: "application/json",
      idempotencyKey: options.idempotencyKey ?? newIdempotencyKey(),
    });
    const conv: Conversation = await res.json();
    this.#rememberETag(conv.id, res);
    return conv;
  }

  /**
   * Changes the subject and/or status of a conversation (a JSON merge
   * patch), if it has not changed since this client last saw it: the
   * request carries `If-Match` with the last ETag seen (from get, create or
   * update), and a conversation changed by someone else in the meantime
   * gives an {@link ApiError} 412 `precondition_failed`; get it again, then
   * retry. Without an ETag seen, the update is unconditional.
   */
  async updateConversation(id: string, patch: ConversationPatch, options: UpdateOptions = {}): Promise<Conversation> {
    const ifMatch = options.ifMatch ?? this.#etags.get(id);
    const res = await this.#call("PATCH", this.#conversationUrl(id), options, {
      body: JSON.stringify(patch),
      contentType: "application/merge-patch+json",
      ifMatch,
    });
    this.#rememberETag(id, res);
    return res.json();
  }

  /**
   * Adds a user of the account to a conversation (idempotent), with
   * `If-Match` as {@link PlatformClient.updateConversation} sends it.
   */
  async addParticipant(conversationId: string, userId: string, options: UpdateOptions = {}): Promise<void> {
    await this.#participant("PUT", conversationId, userId, options);
  }

  /** Removes a participant (idempotent; a user may leave). The last one stays: 409 `last_participant`. */
  async removeParticipant(conversationId: string, userId: string, options: UpdateOptions = {}): Promise<void> {
    await this.#participant("DELETE", conversationId, userId, options);
  }

  async #participant(method: string, conversationId: string, userId: string, options: UpdateOptions): Promise<void> {
    if (!userId) throw new TypeError("a user id is required");
    const url = this.#conversationUrl(conversationId) + "/participants/" + encodeURIComponent(userId);
    const res = await this.#call(method, url, options, { ifMatch: options.ifMatch ?? this.#etags.get(conversationId) });
    this.#rememberETag(conversationId, res);
    await res.body?.cancel();
  }

  /** The last ETag this client saw of a conversation, if any. */
  etag(conversationId: string): string | undefined {
    return this.#etags.get(conversationId);
  }

  /** Posts a message, with an `Idempotency-Key` (generated unless given). */
  async postMessage(conversationId: string, message: NewMessage, options: CreateOptions = {}): Promise<Message> {
    const res = await this.#call("POST", this.#conversationUrl(conversationId) + "/messages", options, {
      body: JSON.stringify(message),
      contentType: "application/json",
      idempotencyKey: options.idempotencyKey ?? newIdempotencyKey(),
    });
    const posted: Message = await res.json();
    await this.#trackETagAfterMessage(conversationId, options);
    return posted;
  }

  /**
   * A message changes its conversation, and so its ETag, which the
   * message's answer does not carry. When the client holds a tag of the
   * conversation, it reads the conversation again (one GET) and keeps the
   * new tag, so that the next update is conditional on the state after the
   * message. Should that read fail, the message stands and the old tag
   * stays: the next update then gets a 412, never a silent overwrite.
   */
  async #trackETagAfterMessage(conversationId: string, options: CallOptions): Promise<void> {
    if (!this.#etags.has(conversationId)) return;
    try {
      await this.getConversation(conversationId, options);
    } catch {
      // The old tag stays (see above).
    }
  }

  /** One page of a conversation's messages, newest first. */
  async listMessagesPage(conversationId: string, options: ListMessagesOptions & { page?: string | undefined } = {}): Promise<Page<Message>> {
    return this.#listPage(() => this.#messagesUrl(conversationId, options), options);
  }

  /** Every message of a conversation, newest first, following `Link`. */
  async *messages(conversationId: string, options: ListMessagesOptions = {}): AsyncGenerator<Message, void, undefined> {
    yield* this.#everyItem(this.#messagesUrl(conversationId, options), (page) => this.listMessagesPage(conversationId, { ...options, page }));
  }

  /** A message of a conversation. */
  async getMessage(conversationId: string, messageId: string, options: CallOptions = {}): Promise<Message> {
    const res = await this.#call("GET", this.#conversationUrl(conversationId) + "/messages/" + encodeURIComponent(messageId), options);
    return res.json();
  }

  /**
   * One page of the event feed (`GET /v1/events`): `{ items, next,
   * position }`, `position` being where to continue from (see
   * {@link EventPage}).
   */
  async eventsPage(options: EventsOptions & { page?: string | undefined } = {}): Promise<EventPage> {
    const page = await this.#listPage<PlatformEvent>(() => this.#eventsUrl("/v1/events", options.after, options), options);
    return { ...page, position: positionOf(page.next) };
  }

  /**
   * The event feed after `after` (a stored position), as an
   * {@link EventFeed}: `for await (const event of feed)` reads page after
   * page while they come full (more are ready), up to the newest event,
   * and `feed.position` is where to resume from.
   * Iterate the same feed again later to read what happened since.
   * An `ApiError` 410 `cursor_expired` says the position is older than
   * what the service keeps: resynchronise (e.g. `conversations({ updatedAfter })`).
   */
  events(options: EventsOptions = {}): EventFeed {
    checkPosition(options.after);
    return new EventFeed(
      options.after,
      options.limit ?? defaultEventPageSize,
      (after) => this.#eventsUrl("/v1/events", after, options),
      (page) => this.eventsPage({ ...options, page }),
    );
  }

  /**
   * Follows the live stream of events (`GET /v1/events/stream`,
   * Server-Sent Events read with `fetch`, the bearer token in the
   * `Authorization` header): `for await (const event of stream)` waits for
   * each event as it happens, for as long as the loop runs. It reconnects
   * by itself when the connection ends or drops (an expired token, a
   * replica that shut down), with a fresh token and `Last-Event-ID`, so no
   * event is lost or repeated; `stream.position` is the last `sequence`
   * received. Leave the loop or abort `signal` to close it. An error
   * answer (400, 410 `cursor_expired`, 429 more than 10 streams) is an
   * `ApiError`.
   */
  streamEvents(options: StreamEventsOptions = {}): EventStream {
    checkPosition(options.after);
    return new EventStream(
      (lastEventId, signal) =>
        this.#call("GET", this.#eventsUrl("/v1/events/stream", lastEventId ?? options.after, options), { signal }, {
          accept: "text/event-stream",
          lastEventId,
        }),
      { signal: options.signal, maxRetries: this.#maxRetries, maxRetryWait: this.#maxRetryWait },
    );
  }

  #eventsUrl(path: string, after: number | string | undefined, options: { limit?: number | undefined; types?: EventType[] | undefined }): string {
    const q = new URLSearchParams();
    if (after !== undefined) q.set("after", String(after));
    if (options.limit !== undefined && path === "/v1/events") q.set("limit", String(options.limit));
    if (options.types !== undefined && options.types.length > 0) q.set("types", options.types.join(","));
    const qs = q.toString();
    return this.conversationsUrl + path + (qs ? "?" + qs : "");
  }

  /**
   * Signs a user up in the service client's account (`users:write`). A
   * taken name is an {@link ApiError} 409 `username_taken`; a password the
   * policy refuses a 400 `weak_password` whose `errors` say why.
   */
  async createUser(input: NewUser, options: CallOptions = {}): Promise<User> {
    const res = await this.#call("POST", this.accountUrl + "/users", options, { body: JSON.stringify(input), contentType: "application/json" });
    return res.json();
  }

  /** A user of the account (`users:read`); another account's id is a 404. */
  async getUser(id: string, options: CallOptions = {}): Promise<User> {
    const res = await this.#call("GET", this.#userUrl(id), options);
    return res.json();
  }

  /** One page of the account's users, oldest first (`users:read`). */
  async listUsersPage(options: ListUsersOptions & { page?: string | undefined } = {}): Promise<Page<User>> {
    return this.#listPage(() => this.#usersUrl(options), options, this.accountUrl);
  }

  /** Every user of the account, oldest first, following `Link`. */
  async *users(options: ListUsersOptions = {}): AsyncGenerator<User, void, undefined> {
    yield* this.#everyItem(this.#usersUrl(options), (page) => this.listUsersPage({ ...options, page }));
  }

  /**
   * Changes a user's `name`, `email` or `disabled` (a JSON merge patch;
   * `null` clears name or email; `users:write`). Disabling ends every
   * session of the user.
   */
  async updateUser(id: string, patch: UserPatch, options: CallOptions = {}): Promise<User> {
    const res = await this.#call("PATCH", this.#userUrl(id), options, {
      body: JSON.stringify(patch),
      contentType: "application/merge-patch+json",
    });
    return res.json();
  }

  /** Sets a user's password (`users:write`); every session of the user ends. */
  async setUserPassword(id: string, password: string, options: CallOptions = {}): Promise<void> {
    const res = await this.#call("PUT", this.#userUrl(id) + "/password", options, {
      body: JSON.stringify({ password }),
      contentType: "application/json",
    });
    await res.body?.cancel();
  }

  /** Erases a user: its document, sessions and login counters (`users:write`). */
  async deleteUser(id: string, options: CallOptions = {}): Promise<void> {
    const res = await this.#call("DELETE", this.#userUrl(id), options);
    await res.body?.cancel();
  }

  /** Who the client's user is (OpenID Connect UserInfo, `GET /userinfo`). */
  async userInfo(options: CallOptions = {}): Promise<UserInfo> {
    if (this.#session.kind === "client_credentials") throw new TypeError("userInfo: a service client has no user");
    const res = await this.#call("GET", this.accountUrl + "/userinfo", options);
    return res.json();
  }

  /**
   * Changes the password of the client's user (`POST /password`). The
   * service ends every session of the user and answers with the tokens of
   * a new one, which this client keeps using (and the new password for
   * later logins). A wrong current password is an {@link ApiError} 403
   * `invalid_current_password`; repeated ones are throttled like logins.
   */
  async changePassword(currentPassword: string, newPassword: string, options: CallOptions & { otp?: string } = {}): Promise<void> {
    if (this.#session.kind !== "password") throw new TypeError("changePassword: only a client given the user's password can change it");
    const start = Date.now();
    const res = await this.#call("POST", this.accountUrl + "/password", options, {
      body: JSON.stringify(options.otp ? { currentPassword, newPassword, otp: options.otp } : { currentPassword, newPassword }),
      contentType: "application/json",
    });
    this.#session.adopt(start, await res.json(), newPassword);
  }

  /**
   * Begins enrolling a TOTP second factor for the client's user: a new
   * secret and its `otpauth://` URI (show it as a QR code), pending until
   * {@link verifyTotp}. 409 `mfa_enrolled` while one is active.
   */
  async enrollTotp(options: CallOptions = {}): Promise<TotpEnrollment> {
    if (this.#session.kind === "client_credentials") throw new TypeError("enrollTotp: a service client has no second factor");
    const res = await this.#call("POST", this.accountUrl + "/mfa/totp", options);
    return res.json();
  }

  /**
   * Activates the pending secret with a current code and returns the 10
   * recovery codes, shown only now. A wrong code is an {@link ApiError}
   * 403 `invalid_otp`.
   */
  async verifyTotp(code: string, options: CallOptions = {}): Promise<string[]> {
    if (this.#session.kind === "client_credentials") throw new TypeError("verifyTotp: a service client has no second factor");
    const res = await this.#call("POST", this.accountUrl + "/mfa/totp/verify", options, {
      body: JSON.stringify({ code }),
      contentType: "application/json",
    });
    return ((await res.json()) as { recoveryCodes: string[] }).recoveryCodes;
  }

  /**
   * Removes the user's second factor, with a code (current or recovery)
   * or the password. 403 `invalid_otp` or `invalid_current_password` when
   * wrong; throttled like logins.
   */
  async removeTotp(proof: { code: string } | { password: string }, options: CallOptions = {}): Promise<void> {
    if (this.#session.kind === "client_credentials") throw new TypeError("removeTotp: a service client has no second factor");
    const res = await this.#call("DELETE", this.accountUrl + "/mfa/totp", options, {
      body: JSON.stringify(proof),
      contentType: "application/json",
    });
    await res.body?.cancel();
  }

  /** Removes a user's second factor (`users:write`); every session of the user ends. */
  async resetUserMfa(id: string, options: CallOptions = {}): Promise<void> {
    const res = await this.#call("DELETE", this.#userUrl(id) + "/mfa", options);
    await res.body?.cancel();
  }

  /**
   * Creates a webhook endpoint (a service client with `webhooks:manage` and
   * `conversations:read`). The answer alone carries its `secret`: keep it
   * to verify deliveries ({@link verifyWebhook}). A 21st endpoint of the
   * account is an {@link ApiError} 409 `too_many_endpoints`.
   */
  async createWebhook(input: NewWebhook, options: CallOptions = {}): Promise<CreatedWebhook> {
    const res = await this.#call("POST", this.conversationsUrl + "/v1/webhooks", options, {
      body: JSON.stringify(input),
      contentType: "application/json",
    });
    return res.json();
  }

  /** One page of the account's endpoints, newest first. */
  async listWebhooksPage(options: CallOptions & { limit?: number | undefined; page?: string | undefined } = {}): Promise<Page<Webhook>> {
    return this.#listPage(() => this.#limited(this.conversationsUrl + "/v1/webhooks", options.limit), options);
  }

  /** Every endpoint of the account, following `Link`. */
  async *webhooks(options: CallOptions & { limit?: number | undefined } = {}): AsyncGenerator<Webhook, void, undefined> {
    yield* this.#everyItem(this.#limited(this.conversationsUrl + "/v1/webhooks", options.limit), (page) => this.listWebhooksPage({ ...options, page }));
  }

  /** One endpoint (without its secret). */
  async getWebhook(id: string, options: CallOptions = {}): Promise<Webhook> {
    return (await this.#call("GET", this.#webhookUrl(id), options)).json();
  }

  /** Changes an endpoint (a JSON merge patch); enabling one clears its `disabledReason`. */
  async updateWebhook(id: string, patch: WebhookPatch, options: CallOptions = {}): Promise<Webhook> {
    const res = await this.#call("PATCH", this.#webhookUrl(id), options, {
      body: JSON.stringify(patch),
      contentType: "application/merge-patch+json",
    });
    return res.json();
  }

  /** Deletes an endpoint. */
  async deleteWebhook(id: string, options: CallOptions = {}): Promise<void> {
    await (await this.#call("DELETE", this.#webhookUrl(id), options)).body?.cancel();
  }

  /**
   * Gives the endpoint a new secret and returns it; the previous one keeps
   * signing beside it for `overlapSeconds` (default: the service's, 24 h; 0
   * stops it at once).
   */
  async rotateWebhookSecret(id: string, options: RotateOptions = {}): Promise<string> {
    const body = options.overlapSeconds === undefined ? {} : { overlap: options.overlapSeconds };
    const res = await this.#call("POST", this.#webhookUrl(id) + "/rotate-secret", options, {
      body: JSON.stringify(body),
      contentType: "application/json",
    });
    return (await res.json()).secret;
  }

  /** Sends a `webhook.test` event to this endpoint only; returns its delivery, pending. */
  async testWebhook(id: string, options: CallOptions = {}): Promise<WebhookDelivery> {
    return (await this.#call("POST", this.#webhookUrl(id) + "/test", options)).json();
  }

  /** One page of the endpoint's deliveries, newest first. */
  async listWebhookDeliveriesPage(id: string, options: CallOptions & { limit?: number | undefined; page?: string | undefined } = {}): Promise<Page<WebhookDelivery>> {
    return this.#listPage(() => this.#limited(this.#webhookUrl(id) + "/deliveries", options.limit), options);
  }

  /** Every delivery of the endpoint, newest first, following `Link`. */
  async *webhookDeliveries(id: string, options: CallOptions & { limit?: number | undefined } = {}): AsyncGenerator<WebhookDelivery, void, undefined> {
    yield* this.#everyItem(this.#limited(this.#webhookUrl(id) + "/deliveries", options.limit), (page) => this.listWebhookDeliveriesPage(id, { ...options, page }));
  }

  /** Delivers one delivery again now, with the same `webhook-id`. */
  async retryWebhookDelivery(id: string, deliveryId: string, options: CallOptions = {}): Promise<void> {
    if (!deliveryId) throw new TypeError("a delivery id is required");
    const url = this.#webhookUrl(id) + "/deliveries/" + encodeURIComponent(deliveryId) + "/retry";
    await (await this.#call("POST", url, options)).body?.cancel();
  }

  #webhookUrl(id: string): string {
    if (!id) throw new TypeError("a webhook endpoint id is required");
    return this.conversationsUrl + "/v1/webhooks/" + encodeURIComponent(id);
  }

  #limited(url: string, limit: number | undefined): string {
    return limit === undefined ? url : `${url}?limit=${encodeURIComponent(String(limit))}`;
  }

  toString(): string {
    return `PlatformClient(${this.accountUrl}, ${this.conversationsUrl}, ${this.#session.kind} credentials)`;
  }

  toJSON(): Record<string, string> {
    return { accountUrl: this.accountUrl, conversationsUrl: this.conversationsUrl, credentials: `${this.#session.kind} (redacted)` };
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /**
   * Sends a request with the session's bearer token. A 401 invalid_token
   * (a key rotation, a revoked session) renews the session and retries the
   * request once, with the same body and idempotency key. A read (GET), or
   * a request with an Idempotency-Key, is also sent again after a network
   * failure or a 429, 502, 503 or 504, up to maxRetries times, waiting
   * Retry-After (else 0.25 s, 0.5 s, …) unless that exceeds maxRetryWait.
   * Any other failure is thrown: an ApiError, or fetch's own error.
   */
  async #call(
    method: string,
    url: string,
    options: CallOptions,
    send: {
      body?: string;
      contentType?: string;
      idempotencyKey?: string | undefined;
      ifMatch?: string | undefined;
      accept?: string;
      lastEventId?: string | undefined;
    } = {},
  ): Promise<Response> {
    const retryable = method === "GET" || Boolean(send.idempotencyKey);
    let renewed = false;
    for (let retries = 0; ; ) {
      const bearer = await this.#session.bearer();
      const headers: Record<string, string> = { Authorization: `Bearer ${bearer.token}`, Accept: send.accept ?? "application/json" };
      if (send.contentType) headers["Content-Type"] = send.contentType;
      if (send.idempotencyKey) headers["Idempotency-Key"] = send.idempotencyKey;
      if (send.ifMatch) headers["If-Match"] = send.ifMatch;
      if (send.lastEventId) headers["Last-Event-ID"] = send.lastEventId;
      let wait: number;
      try {
        const res = await this.#fetch(url, {
          method,
          headers,
          body: send.body ?? null,
          signal: options.signal ?? null,
          credentials: "omit",
        });
        if (res.ok) return res;
        const err = await ApiError.fromResponse(res, method);
        if (err.status === 401 && err.code === "invalid_token" && !renewed) {
          renewed = true;
          this.#session.invalidate(bearer.generation);
          continue;
        }
        if (!retryable || !retryStatuses.has(err.status) || retries >= this.#maxRetries) throw err;
        wait = err.retryAfter ?? 0.25 * 2 ** retries;
        if (wait > this.#maxRetryWait) throw err;
      } catch (err) {
        // fetch rejects with a TypeError when no answer came (refused,
        // reset, DNS); an abort is the caller's and never retried.
        if (err instanceof ApiError || !(err instanceof TypeError) || options.signal?.aborted) throw err;
        if (!retryable || retries >= this.#maxRetries) throw err;
        wait = 0.25 * 2 ** retries;
      }
      retries++;
      await delay(wait * 1000, options.signal);
    }
  }

  #listUrl(options: ListConversationsOptions): string {
    const q = new URLSearchParams();
    if (options.limit !== undefined) q.set("limit", String(options.limit));
    if (options.status !== undefined) q.set("status", options.status);
    if (options.updatedAfter !== undefined) {
      q.set("updatedAfter", options.updatedAfter instanceof Date ? options.updatedAfter.toISOString() : options.updatedAfter);
    }
    const qs = q.toString();
    return this.conversationsUrl + "/v1/conversations" + (qs ? "?" + qs : "");
  }

  #messagesUrl(conversationId: string, options: ListMessagesOptions): string {
    return this.#limited(this.#conversationUrl(conversationId) + "/messages", options.limit);
  }

  #usersUrl(options: ListUsersOptions): string {
    const q = new URLSearchParams();
    if (options.limit !== undefined) q.set("limit", String(options.limit));
    if (options.username !== undefined) q.set("username", options.username);
    const qs = q.toString();
    return this.accountUrl + "/users" + (qs ? "?" + qs : "");
  }

  #userUrl(id: string): string {
    if (!id) throw new TypeError("a user id is required");
    return this.accountUrl + "/users/" + encodeURIComponent(id);
  }

  #conversationUrl(id: string): string {
    if (!id) throw new TypeError("a conversation id is required");
    return this.conversationsUrl + "/v1/conversations/" + encodeURIComponent(id);
  }

  /**
   * One page of a listing of the service at base: the page at options.page
   * (a previous page's `next`) when given, else the first, first().
   */
  async #listPage<T>(first: () => string, options: CallOptions & { page?: string | undefined }, base: string = this.conversationsUrl): Promise<Page<T>> {
    const url = options.page !== undefined ? this.#sameOrigin(options.page, base) : first();
    const res = await this.#call("GET", url, options);
    return { items: await res.json(), next: this.#next(res, base) };
  }

  /** Every item of a listing, page after page from first, following each page's `next`. */
  async *#everyItem<T>(first: string, page: (url: string) => Promise<Page<T>>): AsyncGenerator<T, void, undefined> {
    for (let url: string | undefined = first; url !== undefined; ) {
      const p: Page<T> = await page(url);
      yield* p.items;
      url = p.next;
    }
  }

  /** The absolute URL of a response's next link, if any. */
  #next(res: Response, base: string = this.conversationsUrl): string | undefined {
    const target = nextLink(res.headers.get("Link"));
    return target === undefined ? undefined : this.#sameOrigin(new URL(target, base + "/").href, base);
  }

  /** A URL of the service at base (by default conversations); the bearer token never goes elsewhere. */
  #sameOrigin(url: string, base: string = this.conversationsUrl): string {
    const u = new URL(url, base + "/");
    if (u.origin !== new URL(base).origin) {
      throw new Error(`refusing to follow a link to another origin (${u.origin})`);
    }
    return u.href;
  }

  #rememberETag(id: string, res: Response): void {
    const etag = res.headers.get("ETag");
    if (!etag) return;
    this.#etags.delete(id); // re-inserted last: the oldest entry goes first
    this.#etags.set(id, etag);
    if (this.#etags.size > maxRememberedETags) {
      const oldest = this.#etags.keys().next().value;
      if (oldest !== undefined) this.#etags.delete(oldest);
    }
  }
}

/** A random idempotency key (a UUID). */
export function newIdempotencyKey(): string {
  return globalThis.crypto.randomUUID();
}

/** A stored position is a sequence: a whole number, not negative. */
function checkPosition(after: number | undefined): void {
  if (after !== undefined && !(Number.isSafeInteger(after) && after >= 0)) {
    throw new TypeError("after must be a sequence: a whole number, not negative");
  }
}

function baseUrl(url: string, name: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`${name} is not an absolute URL`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`${name} must be http(s)`);
  return u.href.replace(/\/+$/, "");
}

function checkCredentials(c: Credentials): Credentials {
  if (c && "accessToken" in c) {
    if (typeof c.accessToken !== "function") throw new TypeError("credentials: accessToken must be a function returning the access token");
  } else if (c && "clientId" in c) {
    if (!c.clientId || !c.clientSecret) throw new TypeError("credentials: clientId and clientSecret are required");
  } else if (!c || !c.accountName || !c.username || !c.password) {
    throw new TypeError("credentials: accountName, username and password are required");
  }
  return c;
}
