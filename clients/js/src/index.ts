// @acme/platform-client: the client of the account and conversations
// services for Node.js 20+ and browsers, on fetch, with no dependency.
export { PlatformClient, newIdempotencyKey } from "./client.js";
export type {
  ClientOptions,
  CallOptions,
  CreateOptions,
  UpdateOptions,
  ListConversationsOptions,
  ListMessagesOptions,
  EventsOptions,
  StreamEventsOptions,
  ListUsersOptions,
  Page,
  RotateOptions,
} from "./client.js";
export { ApiError, ErrorCodes, MfaRequiredError, isApiError, parseRetryAfter } from "./errors.js";
export type { ApiErrorInit, ErrorCode } from "./errors.js";
export type { Credentials, PasswordCredentials, ClientCredentials, TokenCredentials, RenewalKind } from "./session.js";
export type * from "./types.js";
export { nextLink } from "./link.js";
export { verifyWebhook, WebhookVerificationError, webhookToleranceSeconds } from "./webhooks.js";
export type { WebhookEvent, WebhookTestEvent, WebhookErrorReason, WebhookHeaders, VerifyOptions } from "./webhooks.js";

export { EventFeed, EventStream } from "./events.js";
export type { EventPage } from "./events.js";
export { SseParser } from "./sse.js";
export type { SseMessage } from "./sse.js";
