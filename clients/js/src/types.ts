// The resource types of both services, from the types openapi-typescript
// generates from their OpenAPI documents (src/generated/).
import type { components as AccountComponents } from "./generated/account.js";
import type { components as ConversationsComponents } from "./generated/conversations.js";

type AccountSchemas = AccountComponents["schemas"];
type ConversationsSchemas = ConversationsComponents["schemas"];

/** An integration definition of the caller's account. */
export type Definition = AccountSchemas["Definition"];
/** The token set of a user session (POST /login, POST /token/refresh). */
export type TokenSet = AccountSchemas["TokenSet"];
/** A user of the account, as a service client with `users:read` sees it. */
export type User = AccountSchemas["User"];
/** A user to create: `username`, `password`, optional `name` and `email`. */
export type NewUser = AccountSchemas["NewUser"];
/** A JSON merge patch of a user: `name`, `email` (null clears), `disabled`. */
export type UserPatch = AccountSchemas["UserPatch"];
/** A begun TOTP enrolment: the secret and its `otpauth://` URI. */
export type TotpEnrollment = AccountSchemas["TOTPEnrolment"];

/** Who the client's user is (OpenID Connect UserInfo). */
export type UserInfo = AccountSchemas["UserInfo"];

/** A conversation. */
export type Conversation = ConversationsSchemas["Conversation"];
/** The members of a conversation to create; all optional. */
export type NewConversation = ConversationsSchemas["NewConversation"];
/** `open`, `snoozed` or `closed`. */
export type ConversationStatus = ConversationsSchemas["ConversationStatus"];
/** One offending input of a `validation_failed` problem. */
export type FieldError = ConversationsSchemas["FieldError"];
/** A problem (RFC 9457) as the services send it. */
export type Problem = ConversationsSchemas["Problem"];

/** A JSON merge patch (RFC 7396) of a conversation: what may change. */
export type ConversationPatch = ConversationsSchemas["ConversationPatch"];
/** A message of a conversation; immutable. */
export type Message = ConversationsSchemas["Message"];
/** A message to post. */
export type NewMessage = ConversationsSchemas["NewMessage"];

/** A webhook endpoint of the account (never its secret). */
export type Webhook = ConversationsSchemas["Webhook"];
/** A created endpoint: the only time its `secret` is shown. */
export type CreatedWebhook = ConversationsSchemas["CreatedWebhook"];
/** The members of an endpoint to create; `url` is required. */
export type NewWebhook = ConversationsSchemas["NewWebhook"];
/** A JSON merge patch of an endpoint. */
export type WebhookPatch = ConversationsSchemas["WebhookPatch"];
/** One event to one endpoint, with its last attempt's outcome. */
export type WebhookDelivery = ConversationsSchemas["WebhookDelivery"];

/** The types of the events of the feed and the stream. */
export type EventType = ConversationsSchemas["EventType"];

/**
 * What an event has whatever its type. `sequence` orders the events of an
 * account (gaps allowed); `timestamp` is when the change happened (RFC 3339
 * UTC, milliseconds).
 */
interface EventOf<T extends EventType, D> {
  /** `evt_…`, unique. */
  id: string;
  type: T;
  sequence: number;
  timestamp: string;
  data: D;
}

/** The fields a `conversation.updated` changed, each with its value before the change. */
export interface ConversationChanges {
  subject?: string;
  status?: ConversationStatus;
}

/** A conversation was created: `data.conversation` as created. */
export type ConversationCreatedEvent = EventOf<"conversation.created", { conversation: Conversation }>;
/** `subject` or `status` changed: `data.changes` holds each changed field's previous value. */
export type ConversationUpdatedEvent = EventOf<"conversation.updated", { conversation: Conversation; changes: ConversationChanges }>;
/** A participant was added: `data.userId`. */
export type ParticipantAddedEvent = EventOf<"conversation.participant_added", { conversation: Conversation; userId: string }>;
/** A participant was removed: `data.userId`. */
export type ParticipantRemovedEvent = EventOf<"conversation.participant_removed", { conversation: Conversation; userId: string }>;
/** A message was posted: `data.message`, and `data.conversation` after it. */
export type MessageCreatedEvent = EventOf<"message.created", { conversation: Conversation; message: Message }>;

/**
 * An event of the feed or the stream; switch on `type` to narrow it (the
 * OpenAPI document's `Event` is one flat shape; this union says which data
 * each type carries). The shape is versioned with the API: fields may be
 * added, never removed.
 */
export type PlatformEvent =
  | ConversationCreatedEvent
  | ConversationUpdatedEvent
  | ParticipantAddedEvent
  | ParticipantRemovedEvent
  | MessageCreatedEvent;

/** Each event type is a member of the union: a type the document adds fails the build until it is described here. */
type AssertEveryType<T extends PlatformEvent["type"]> = T;
type _EveryEventTypeDescribed = AssertEveryType<EventType>;
