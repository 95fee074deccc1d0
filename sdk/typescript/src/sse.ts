/**
 * Server-Sent Events read from a byte stream into events: the frames of a
 * `text/event-stream` body, comments and keep-alives skipped.
 */

/** A task's last event is one of these. */
export const TERMINAL_TYPES: ReadonlySet<string> = new Set(["succeeded", "failed", "cancelled"]);

/**
 * One event of a stream: `id` is its position (what `Last-Event-ID`
 * resumes after), `type` its kind (`queued`, `started`, … `succeeded`),
 * `data` the event's JSON as the API stores it.
 */
export interface StreamEvent {
  id: string | undefined;
  type: string;
  data: Record<string, unknown> & { seq?: number; task_id?: string };
}

export function isTerminal(event: StreamEvent): boolean {
  return TERMINAL_TYPES.has(event.type);
}

/** Turns lines into events; a blank line completes one. */
export class FrameReader {
  private id: string | undefined;
  private event: string | undefined;
  private data: string[] = [];

  feed(line: string): StreamEvent | undefined {
    if (line === "") {
      return this.dispatch();
    }
    if (line.startsWith(":")) {
      return undefined;
    }
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) {
      value = value.slice(1);
    }
    if (name === "id") {
      this.id = value;
    } else if (name === "event") {
      this.event = value;
    } else if (name === "data") {
      this.data.push(value);
    }
    return undefined;
  }

  private dispatch(): StreamEvent | undefined {
    if (this.data.length === 0 && this.event === undefined) {
      return undefined;
    }
    const text = this.data.join("\n");
    let data: Record<string, unknown>;
    try {
      const parsed: unknown = text ? JSON.parse(text) : {};
      data = parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : { value: parsed };
    } catch {
      data = { raw: text };
    }
    const type = this.event ?? (typeof data.type === "string" ? data.type : "message");
    this.event = undefined;
    this.data = [];
    return { id: this.id, type, data };
  }
}

/** The lines of a body, split on `\n`, `\r\n` or `\r`. */
export async function* lines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        break;
      }
      buffer += decoder.decode(value, { stream: true });
      let match: RegExpExecArray | null;
      const newline = /\r\n|\r|\n/g;
      let start = 0;
      while ((match = newline.exec(buffer)) !== null) {
        if (match[0] === "\r" && match.index === buffer.length - 1) {
          break; // a `\r` at the end may be the first half of `\r\n`
        }
        yield buffer.slice(start, match.index);
        start = match.index + match[0].length;
      }
      buffer = buffer.slice(start);
    }
    buffer += decoder.decode();
    if (buffer) {
      yield buffer;
    }
  } finally {
    reader.releaseLock();
  }
}
