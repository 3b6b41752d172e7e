// Verifying webhook deliveries (Standard Webhooks v1) with WebCrypto: the
// same code in Node.js 20+ and browsers (a receiver usually runs in Node;
// a browser test may replay one).
import type { PlatformEvent } from "./types.js";

/** How far a delivery's `webhook-timestamp` may be from the receiver's clock. */
export const webhookToleranceSeconds = 5 * 60;

/** Why {@link verifyWebhook} refused a delivery. */
export type WebhookErrorReason = "headers" | "timestamp" | "signature" | "payload" | "secret";

/** A refused delivery: `reason` says why; answer it with a 400. */
export class WebhookVerificationError extends Error {
  readonly reason: WebhookErrorReason;
  constructor(reason: WebhookErrorReason, message: string) {
    super(`webhook: ${message}`);
    this.name = "WebhookVerificationError";
    this.reason = reason;
  }
}

/**
 * A test delivery (`POST /v1/webhooks/{id}/test`): never in the feed, so
 * no `sequence`; `data.endpointId` is the endpoint tested.
 */
export interface WebhookTestEvent {
  id: string;
  type: "webhook.test";
  sequence: null;
  timestamp: string;
  data: { endpointId: string };
}

/**
 * A verified delivery's event: an event of the feed ({@link PlatformEvent},
 * narrowed by `type`), or a test delivery. Its `id` is also `webhook-id`,
 * the same on every attempt, so repeats can be dropped; deliveries may
 * arrive out of order: order by `sequence`.
 */
export type WebhookEvent = PlatformEvent | WebhookTestEvent;

/** Header fields as fetch's Headers, or a Node.js `IncomingHttpHeaders`-like record. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** The receiver's clock (default: now), for a replay or a test. */
  now?: Date | undefined;
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined;
  const record = headers as Record<string, string | string[] | undefined>;
  for (const key of Object.keys(record)) {
    if (key.toLowerCase() === name) {
      const v = record[key];
      return Array.isArray(v) ? v.join(", ") : v;
    }
  }
  return undefined;
}

function fromBase64(s: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) return undefined;
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Compares in time that depends only on the lengths. */
function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/**
 * Verifies a delivery: the signature over `webhook-id`, `webhook-timestamp`
 * and the raw body under any of `secrets` (several while a secret is
 * rotated), compared in constant time, and the timestamp within 5 minutes.
 * Pass the body exactly as received (a string or the bytes), before any
 * JSON parsing. Resolves to the event; rejects with a
 * {@link WebhookVerificationError}.
 */
export async function verifyWebhook(
  secrets: string | readonly string[],
  headers: WebhookHeaders,
  rawBody: string | Uint8Array,
  options: VerifyOptions = {},
): Promise<WebhookEvent> {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !ts || !signatures) {
    throw new WebhookVerificationError("headers", "missing webhook-id, webhook-timestamp or webhook-signature");
  }
  if (!/^[0-9]+$/.test(ts)) throw new WebhookVerificationError("headers", "webhook-timestamp is not Unix seconds");
  if (options.now !== undefined && !(options.now instanceof Date)) {
    throw new TypeError("verifyWebhook: options.now is a Date");
  }
  const now = Math.floor((options.now ?? new Date()).getTime() / 1000);
  if (Math.abs(now - Number(ts)) > webhookToleranceSeconds) {
    throw new WebhookVerificationError("timestamp", "webhook-timestamp is more than 5 minutes from now");
  }
  const body = typeof rawBody === "string" ? new TextEncoder().encode(rawBody) : rawBody;
  const prefix = new TextEncoder().encode(`${id}.${ts}.`);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix);
  signed.set(body, prefix.length);
  const expected: Uint8Array[] = [];
  for (const secret of typeof secrets === "string" ? [secrets] : secrets) {
    const key = fromBase64(secret.startsWith("whsec_") ? secret.slice(6) : secret);
    if (!key || key.length === 0) throw new WebhookVerificationError("secret", "a secret is not whsec_ and base64");
    const hmac = await globalThis.crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    expected.push(new Uint8Array(await globalThis.crypto.subtle.sign("HMAC", hmac, signed)));
  }
  let matched = false;
  for (const versioned of signatures.split(" ")) {
    const comma = versioned.indexOf(",");
    if (comma < 0 || versioned.slice(0, comma) !== "v1") continue;
    const got = fromBase64(versioned.slice(comma + 1));
    if (!got) continue;
    for (const want of expected) {
      if (equal(got, want)) matched = true; // every comparison runs
    }
  }
  if (!matched) throw new WebhookVerificationError("signature", "no signature matches any of the secrets");
  let event: { id?: unknown; type?: unknown } | null;
  try {
    event = JSON.parse(new TextDecoder().decode(body));
  } catch {
    throw new WebhookVerificationError("payload", "the body is not JSON");
  }
  if (event === null || typeof event !== "object" || Array.isArray(event) || typeof event.id !== "string" || typeof event.type !== "string") {
    throw new WebhookVerificationError("payload", "the body is not an event");
  }
  if (event.id !== id) throw new WebhookVerificationError("payload", "the body's id is not the webhook-id");
  return event as WebhookEvent;
}
