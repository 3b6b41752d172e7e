import { delay } from "./delay.js";
import { SseParser } from "./sse.js";
import type { PlatformEvent } from "./types.js";

/** One page of the event feed. */
export interface EventPage {
  /** The events visible to the caller, oldest first. */
  items: PlatformEvent[];
  /** The URL to continue from (`Link: rel="next"`, absolute). */
  next: string | undefined;
  /**
   * The position to continue from: the `after` of `next`, the highest
   * `sequence` the service examined for this caller, which may be past the
   * last item (events the caller may not see, or filtered out by `types`).
   */
  position: number | undefined;
}

/** The position (`after`) a next link names, if it names one. */
export function positionOf(next: string | undefined): number | undefined {
  if (next === undefined) return undefined;
  const after = new URL(next).searchParams.get("after");
  return after !== null && /^\d+$/.test(after) ? Number(after) : undefined;
}

/** The page size of the feed when none is given. */
export const defaultEventPageSize = 100;

/**
 * The event feed of the caller from a position, as an async iterable: each
 * `for await` reads the events after {@link EventFeed.position}, page after
 * page by the `Link: rel="next"` of each, until the service has nothing
 * more ready (a page that is not full, or does not move the position on),
 * and moves the position on as the loop goes. Store `position` after handling an event and give
 * it as `after` next time (or iterate the same feed again later): no event
 * is skipped or repeated.
 */
export class EventFeed implements AsyncIterable<PlatformEvent> {
  #position: number | undefined;
  readonly #pageSize: number;
  readonly #firstUrl: (after: number | undefined) => string;
  readonly #readPage: (url: string) => Promise<EventPage>;

  /** @internal The client builds feeds: {@link PlatformClient.events}. */
  constructor(
    after: number | undefined,
    pageSize: number,
    firstUrl: (after: number | undefined) => string,
    readPage: (url: string) => Promise<EventPage>,
  ) {
    this.#position = after;
    this.#pageSize = pageSize;
    this.#firstUrl = firstUrl;
    this.#readPage = readPage;
  }

  /**
   * The position after the events handled so far: the `sequence` of the
   * last event the loop received, or, once a page is done, the position
   * its next link names. Undefined before anything was read without `after`.
   */
  get position(): number | undefined {
    return this.#position;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<PlatformEvent, void, undefined> {
    let url = this.#firstUrl(this.#position);
    for (;;) {
      const before = this.#position;
      const page = await this.#readPage(url);
      for (const event of page.items) {
        yield event;
        this.#position = event.sequence;
      }
      if (page.position !== undefined) this.#position = page.position;
      // A full page means more are ready now; anything less, that the
      // feed is read up to the newest event the caller may see.
      const full = page.items.length >= this.#pageSize;
      if (!full || page.next === undefined || (before !== undefined && page.position === before)) return;
      url = page.next;
    }
  }
}

/** Opens one connection of the stream, resuming after lastEventId when given. */
export type StreamOpener = (lastEventId: string | undefined, signal: AbortSignal | undefined) => Promise<Response>;

/** Options of {@link EventStream}. */
export interface EventStreamLimits {
  signal?: AbortSignal | undefined;
  /** How many connections in a row may end without sending anything before the stream gives up. */
  maxRetries: number;
  /** The longest wait between connections, in seconds. */
  maxRetryWait: number;
}

/**
 * The live stream of the caller's events (`GET /v1/events/stream`,
 * Server-Sent Events), as an async iterable that follows it for as long as
 * the loop runs. When the connection ends (the bearer token expired, the
 * replica shut down) or drops, it connects again with a fresh token and
 * `Last-Event-ID` set to the last id received, so the service resumes
 * right after it: no event is lost or repeated. Leaving the loop (`break`,
 * an exception) or aborting the signal closes the connection.
 */
export class EventStream implements AsyncIterable<PlatformEvent> {
  readonly #open: StreamOpener;
  readonly #limits: EventStreamLimits;
  #lastEventId: string | undefined;
  #connections = 0;

  /** @internal The client builds streams: {@link PlatformClient.streamEvents}. */
  constructor(open: StreamOpener, limits: EventStreamLimits) {
    this.#open = open;
    this.#limits = limits;
  }

  /** The id (`sequence`) of the last event received, as the stream sent it; undefined before the first. */
  get lastEventId(): string | undefined {
    return this.#lastEventId;
  }

  /** The `sequence` of the last event received, to store and resume from (`after`). */
  get position(): number | undefined {
    const id = this.#lastEventId;
    return id !== undefined && /^\d+$/.test(id) ? Number(id) : undefined;
  }

  /** How many connections the stream has opened (1 until it reconnects). */
  get connections(): number {
    return this.#connections;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<PlatformEvent, void, undefined> {
    const { signal, maxRetries, maxRetryWait } = this.#limits;
    let silent = 0; // connections in a row that ended without sending anything
    let retryMs: number | undefined;
    for (;;) {
      const res = await this.#open(this.#lastEventId, signal);
      this.#connections++;
      const type = res.headers.get("Content-Type") ?? "";
      if (!/^text\/event-stream\b/i.test(type) || !res.body) {
        await res.body?.cancel();
        throw new Error(`GET ${new URL(res.url || "http://x/").pathname}: want text/event-stream, got ${type || "no body"}`);
      }
      const parser = new SseParser(this.#lastEventId ?? "");
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let heard = false;
      let dropped: unknown;
      try {
        for (;;) {
          const { done, value } = await readWithin(reader, streamIdleTimeoutMs);
          if (done) break;
          heard = true;
          for (const message of parser.push(decoder.decode(value, { stream: true }))) {
            const event = parseEvent(message.data);
            this.#lastEventId = message.id;
            yield event;
          }
          if (parser.lastEventId !== "") this.#lastEventId = parser.lastEventId;
          if (parser.retry !== undefined) retryMs = parser.retry;
        }
      } catch (err) {
        // fetch reports a connection that broke while reading as a
        // TypeError; an abort and anything else are the caller's.
        if (signal?.aborted || !(err instanceof TypeError)) throw err;
        dropped = err;
      } finally {
        // Also when the loop left early: closes the connection.
        reader.cancel().catch(() => undefined);
      }
      silent = heard ? 0 : silent + 1;
      if (silent > maxRetries) {
        throw dropped ?? new Error(`the event stream ended ${silent} times in a row without sending anything`);
      }
      const waitMs = silent === 0 ? (retryMs ?? 0) : 250 * 2 ** (silent - 1);
      await delay(Math.min(waitMs, maxRetryWait * 1000), signal);
    }
  }
}

/**
 * How long a stream may stay silent before it counts as dropped: the
 * service sends a comment at least every 15 s, and a connection that broke
 * without a word (a half-open TCP connection) must not hang the loop.
 */
const streamIdleTimeoutMs = 60_000;

/** reader.read(), or a TypeError (a dropped connection) after ms without data. */
function readWithin(reader: ReadableStreamDefaultReader<Uint8Array>, ms: number): Promise<ReadableStreamReadResult<Uint8Array>> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new TypeError(`the event stream was silent for ${ms / 1000} s`)), ms);
    reader.read().then(
      (result) => {
        clearTimeout(timer);
        resolve(result);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

function parseEvent(data: string): PlatformEvent {
  let event: unknown;
  try {
    event = JSON.parse(data);
  } catch {
    throw new Error("the event stream sent data that is not JSON");
  }
  if (typeof event !== "object" || event === null || typeof (event as { type?: unknown }).type !== "string") {
    throw new Error("the event stream sent data that is not an event");
  }
  return event as PlatformEvent;
}
