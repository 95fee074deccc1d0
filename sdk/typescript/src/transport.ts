/**
 * Sending requests on `fetch`: the bearer key, retries of 429 and 503
 * after `Retry-After`, typed errors, pages and event streams that resume
 * with `Last-Event-ID`.
 */

import { APIConnectionError, APIStatusError, StreamEndedError, errorFromResponse } from "./errors.js";
import { parseRetryAfter, retryDelay, sleep, type RetryPolicy } from "./retry.js";
import { FrameReader, isTerminal, lines, type StreamEvent } from "./sse.js";

/** How long a plain call may take, in seconds. */
export const DEFAULT_TIMEOUT = 30;
/** Reconnections in a row, without an event between them, before a stream gives up. */
export const MAX_RECONNECTS = 8;

export type Query = Record<string, string | number | boolean | undefined | null>;

export interface TransportOptions {
  baseUrl: string;
  apiKey: string;
  retry: RetryPolicy;
  timeout: number;
  fetch: typeof fetch;
}

export class Transport {
  constructor(private readonly options: TransportOptions) {}

  get baseUrl(): string {
    return this.options.baseUrl;
  }

  private url(path: string, query?: Query): string {
    const url = new URL(this.options.baseUrl + path);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) {
        url.searchParams.set(name, String(value));
      }
    }
    return url.toString();
  }

  /** Sends a request, retrying 429 and 503 as the policy allows; answers a 2xx response or throws the typed error. */
  async send(method: string, path: string, init: { query?: Query; body?: unknown; stream?: boolean; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<Response> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.options.apiKey}`,
      Accept: init.stream ? "text/event-stream" : "application/json",
      ...init.headers,
    };
    if (init.body !== undefined) {
      headers["Content-Type"] = "application/json";
    }
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        const signal = init.signal ?? (init.stream ? undefined : AbortSignal.timeout(this.options.timeout * 1000));
        response = await this.options.fetch(this.url(path, init.query), {
          method,
          headers,
          body: init.body === undefined ? undefined : JSON.stringify(init.body),
          signal,
        });
      } catch (e) {
        throw new APIConnectionError(`the API at ${this.options.baseUrl} is unreachable (${e instanceof Error ? e.message : String(e)})`);
      }
      if (response.ok) {
        return response;
      }
      const text = await response.text();
      const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
      const delay = retryDelay(this.options.retry, attempt, response.status, retryAfter);
      if (delay === undefined) {
        throw errorFromResponse(response.status, text, retryAfter);
      }
      await sleep(delay);
    }
  }

  /** A call's JSON answer (`undefined` for an empty one). */
  async json<T>(method: string, path: string, init: { query?: Query; body?: unknown } = {}): Promise<T> {
    const response = await this.send(method, path, init);
    const text = await response.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** Every item of a list, page after page: `items` names each page's array. */
  async *pages<T>(path: string, items: string, query: Query): AsyncGenerator<T> {
    const params: Query = { ...query };
    for (;;) {
      const page = await this.json<Record<string, unknown>>("GET", path, { query: params });
      for (const item of (page[items] as T[] | undefined) ?? []) {
        yield item;
      }
      const cursor = page.next_cursor;
      if (typeof cursor !== "string" || !cursor) {
        return;
      }
      params.cursor = cursor;
    }
  }

  /**
   * A stream's events, reconnecting with `Last-Event-ID` when it closes or
   * breaks, until a task's terminal event (`stopAtTerminal`) or until
   * `finished()` holds after a close.
   */
  async *follow(path: string, lastId: string | undefined, stopAtTerminal: boolean, finished: () => Promise<boolean>): AsyncGenerator<StreamEvent> {
    let failures = 0;
    for (;;) {
      const controller = new AbortController();
      const headers: Record<string, string> = lastId ? { "Last-Event-ID": lastId } : {};
      const reader = new FrameReader();
      try {
        const response = await this.send("GET", path, { stream: true, headers, signal: controller.signal });
        if (response.body) {
          for await (const line of lines(response.body)) {
            const event = reader.feed(line);
            if (!event) {
              continue;
            }
            failures = 0;
            lastId = event.id ?? lastId;
            yield event;
            if (stopAtTerminal && isTerminal(event)) {
              return;
            }
          }
        }
      } catch (e) {
        if (e instanceof APIStatusError) {
          throw e;
        }
        // A refused or broken connection: resumed below, after the last event received.
      } finally {
        controller.abort();
      }
      if (await finished()) {
        return;
      }
      failures += 1;
      if (failures > MAX_RECONNECTS) {
        throw new StreamEndedError(`the event stream ${path} kept closing before its end`);
      }
      await sleep(Math.min(0.2 * 2 ** failures, 5));
    }
  }
}
