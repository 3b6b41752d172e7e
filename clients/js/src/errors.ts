import type { FieldError } from "./types.js";

/**
 * The stable codes of {@link ApiError.code}: one for every code of the
 * services' problems (docs/errors.md) and of the token endpoint's OAuth
 * errors (RFC 6749 section 5.2). New codes may appear; an answer without a
 * code has `http_<status>`.
 */
export const ErrorCodes = {
  MalformedJson: "malformed_json",
  ValidationFailed: "validation_failed",
  InvalidCredentials: "invalid_credentials",
  InvalidToken: "invalid_token",
  InsufficientScope: "insufficient_scope",
  WeakPassword: "weak_password",
  UsernameTaken: "username_taken",
  InvalidCurrentPassword: "invalid_current_password",
  MfaRequired: "mfa_required",
  InvalidOtp: "invalid_otp",
  MfaEnrolled: "mfa_enrolled",
  MfaNotStarted: "mfa_not_started",
  NotFound: "not_found",
  MethodNotAllowed: "method_not_allowed",
  Conflict: "conflict",
  PreconditionFailed: "precondition_failed",
  ConversationClosed: "conversation_closed",
  TooManyParticipants: "too_many_participants",
  LastParticipant: "last_participant",
  IdempotencyKeyReused: "idempotency_key_reused",
  CursorExpired: "cursor_expired",
  TooManyEndpoints: "too_many_endpoints",
  BodyTooLarge: "body_too_large",
  UnsupportedMediaType: "unsupported_media_type",
  TooManyRequests: "too_many_requests",
  ServiceUnavailable: "service_unavailable",
  Overloaded: "overloaded",
  MalformedRequest: "malformed_request",
  UnsupportedTransferEncoding: "unsupported_transfer_encoding",
  HeadersTooLarge: "headers_too_large",
  RequestTimeout: "request_timeout",
  SlowDown: "slow_down",
  TemporarilyUnavailable: "temporarily_unavailable",
  ServerError: "server_error",
  InternalError: "internal_error",
  InvalidRequest: "invalid_request",
  InvalidClient: "invalid_client",
  InvalidGrant: "invalid_grant",
  InvalidScope: "invalid_scope",
  UnauthorizedClient: "unauthorized_client",
  UnsupportedGrantType: "unsupported_grant_type",
  /** The sign-in page's 403 for a form without this browser's CSRF token: a browser sees it, never an API call. */
  InvalidCsrfToken: "invalid_csrf_token",
} as const;

/** A code of {@link ErrorCodes}. */
export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

/** What an {@link ApiError} is made of. */
export interface ApiErrorInit {
  status: number;
  code: string;
  title?: string | undefined;
  detail?: string | undefined;
  type?: string | undefined;
  instance?: string | undefined;
  fieldErrors?: FieldError[] | undefined;
  retryAfter?: number | undefined;
  requestId?: string | undefined;
  method?: string | undefined;
  url?: string | undefined;
}

/**
 * Every answer of a service outside 2xx: the RFC 9457 problem of the
 * services, or the RFC 6749 error of the token endpoint, in one shape.
 * Switch on {@link ApiError.code}, never on the message.
 *
 * It carries no credential because the client never puts one there: no
 * password, client secret or token is ever part of a request line, request
 * bodies and headers are not kept, and the service's texts are kept as
 * they came.
 */
export class ApiError extends Error {
  /** The HTTP status, e.g. 404. */
  readonly status: number;
  /**
   * The stable machine-readable code, e.g. `validation_failed`,
   * `invalid_credentials`, `precondition_failed`; `http_<status>` when the
   * body was not a problem (a proxy's page, say).
   */
  readonly code: string;
  readonly title: string | undefined;
  readonly detail: string | undefined;
  readonly type: string | undefined;
  readonly instance: string | undefined;
  /** The offending inputs of a `validation_failed` problem; empty otherwise. */
  readonly fieldErrors: readonly FieldError[];
  /** Seconds to wait before trying again (429, 503), from `Retry-After`. */
  readonly retryAfter: number | undefined;
  /** The `X-Request-ID` of the response, for support. */
  readonly requestId: string | undefined;
  /** The method and URL of the request (they never hold a secret). */
  readonly method: string | undefined;
  readonly url: string | undefined;

  constructor(init: ApiErrorInit) {
    const what = init.detail || init.title || "request failed";
    super(`${init.method ? `${init.method} ${pathOf(init.url)}: ` : ""}${init.status} ${init.code}: ${what}`);
    this.name = "ApiError";
    this.status = init.status;
    this.code = init.code;
    this.title = init.title;
    this.detail = init.detail;
    this.type = init.type;
    this.instance = init.instance;
    this.fieldErrors = Object.freeze([...(init.fieldErrors ?? [])]);
    this.retryAfter = init.retryAfter;
    this.requestId = init.requestId;
    this.method = init.method;
    this.url = init.url;
  }

  /**
   * The error of init: a {@link MfaRequiredError} for the code
   * `mfa_required`, else an ApiError.
   */
  static of(init: ApiErrorInit): ApiError {
    return init.code === ErrorCodes.MfaRequired ? new MfaRequiredError(init) : new ApiError(init);
  }

  /** Reads a failed response into an ApiError (it consumes the body). */
  static async fromResponse(res: Response, method?: string): Promise<ApiError> {
    const base = {
      status: res.status,
      retryAfter: parseRetryAfter(res.headers.get("Retry-After")),
      requestId: res.headers.get("X-Request-ID") ?? undefined,
      method,
      url: res.url || undefined,
    };
    let body: unknown;
    try {
      const text = await res.text();
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    if (isObject(body) && typeof body["code"] === "string") {
      // RFC 9457 problem+json of the services.
      return ApiError.of({
        ...base,
        code: body["code"],
        title: str(body["title"]),
        detail: str(body["detail"]),
        type: str(body["type"]),
        instance: str(body["instance"]),
        fieldErrors: fieldErrors(body["errors"]),
      });
    }
    if (isObject(body) && typeof body["error"] === "string") {
      // RFC 6749 section 5.2 error of POST /oauth2/token.
      return ApiError.of({ ...base, code: body["error"], detail: str(body["error_description"]) });
    }
    return ApiError.of({ ...base, code: `http_${res.status}`, title: res.statusText || undefined });
  }

  /** A plain object of the fields, for structured logs. */
  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      message: this.message,
      status: this.status,
      code: this.code,
      title: this.title,
      detail: this.detail,
      fieldErrors: this.fieldErrors,
      retryAfter: this.retryAfter,
      requestId: this.requestId,
      method: this.method,
      url: this.url,
    };
  }
}

/**
 * The user has a second factor: sign in again with a code of it
 * (`loginWithOtp`). A 401 of `POST /login` and the password grant (a 403
 * of `changePassword` without `otp`); it never tells whether the password
 * was right.
 */
export class MfaRequiredError extends ApiError {
  constructor(init: ApiErrorInit) {
    super(init);
    this.name = "MfaRequiredError";
  }
}

/** Whether err is an {@link ApiError}, with the given code when one is given. */
export function isApiError(err: unknown, code?: string): err is ApiError {
  return err instanceof ApiError && (code === undefined || err.code === code);
}

/**
 * Parses Retry-After (RFC 9110 section 10.2.3): delta-seconds or an
 * HTTP-date, as whole seconds from now (at least 0).
 */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

function pathOf(url: string | undefined): string {
  if (!url) return "";
  try {
    const u = new URL(url);
    return u.pathname;
  } catch {
    return "";
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

function fieldErrors(v: unknown): FieldError[] {
  if (!Array.isArray(v)) return [];
  return v
    .filter(isObject)
    .map((e) => ({ field: str(e["field"]) ?? "", reason: str(e["reason"]) ?? "" }));
}
