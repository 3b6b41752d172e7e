/**
 * One message of a Server-Sent Events stream, as the HTML standard's event
 * stream interpretation dispatches it: `id` is the last event ID after
 * this message (it persists across messages), `event` the type ("message"
 * when the block named none), `data` the data lines joined by "\n".
 */
export interface SseMessage {
  id: string;
  event: string;
  data: string;
}

/**
 * An incremental parser of `text/event-stream` (HTML standard, section
 * 9.2.6): feed it the decoded text as it arrives, in chunks of any size; it
 * returns the messages each chunk completes. Lines end with CRLF, LF or CR
 * (a CRLF split across chunks counts once); lines starting with ":" are
 * comments; a field's value loses one leading space; `retry:` with digits
 * only sets {@link SseParser.retry}; an `id` containing NUL is ignored; a
 * block without data dispatches nothing.
 */
export class SseParser {
  /** The last event ID: the id of the last message, or of the last `id:` line of a completed block. */
  lastEventId: string;
  /** The reconnection time the server asked for (`retry:`, milliseconds), if any. */
  retry: number | undefined;
  #line = "";
  #skipLF = false;
  #data: string[] = [];
  #event = "";
  #id: string;

  constructor(lastEventId = "") {
    this.lastEventId = lastEventId;
    this.#id = lastEventId;
  }

  /** Parses the next chunk of the stream; returns the messages it completes. */
  push(chunk: string): SseMessage[] {
    const out: SseMessage[] = [];
    let start = 0;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk.charCodeAt(i);
      if (c === 10 && this.#skipLF) {
        // The LF of a CRLF whose CR ended the previous line.
        this.#skipLF = false;
        start = i + 1;
        continue;
      }
      this.#skipLF = false;
      if (c !== 10 && c !== 13) continue;
      this.#line += chunk.slice(start, i);
      this.#skipLF = c === 13;
      start = i + 1;
      const message = this.#processLine(this.#line);
      this.#line = "";
      if (message) out.push(message);
    }
    this.#line += chunk.slice(start);
    return out;
  }

  #processLine(line: string): SseMessage | undefined {
    if (line === "") return this.#dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.#event = value;
        break;
      case "data":
        this.#data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.#id = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
    }
    return undefined;
  }

  #dispatch(): SseMessage | undefined {
    this.lastEventId = this.#id;
    const data = this.#data;
    const event = this.#event || "message";
    this.#data = [];
    this.#event = "";
    if (data.length === 0) return undefined;
    return { id: this.lastEventId, event, data: data.join("\n") };
  }
}
