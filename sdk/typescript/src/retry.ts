/**
 * When to try a call again: 429 and 503 are retried after the API's
 * `Retry-After` (or a growing backoff when it sends none), at most
 * `maxRetries` times and never after a wait longer than `maxRetryWait`
 * seconds; then the typed error surfaces.
 */

/** The statuses a call is retried on. */
export const RETRIED_STATUSES: ReadonlySet<number> = new Set([429, 503]);

export interface RetryPolicy {
  /** How many times a refused call is sent again (default 3). */
  maxRetries: number;
  /** The longest wait before a retry, in seconds (default 60). */
  maxRetryWait: number;
  /** The first backoff when the answer names no wait, doubled each time (seconds). */
  backoff: number;
}

/** Seconds to wait before retry number `attempt + 1`, or `undefined` when the call must not be retried. */
export function retryDelay(policy: RetryPolicy, attempt: number, status: number, retryAfter?: number): number | undefined {
  if (!RETRIED_STATUSES.has(status) || attempt >= policy.maxRetries) {
    return undefined;
  }
  const wait = retryAfter ?? policy.backoff * 2 ** attempt * (0.75 + Math.random() / 2);
  if (wait > policy.maxRetryWait) {
    return undefined;
  }
  return Math.max(wait, 0);
}

/** `Retry-After` as seconds: a whole number of seconds or an HTTP date. */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  const text = value?.trim();
  if (!text) {
    return undefined;
  }
  const seconds = Number(text);
  if (Number.isFinite(seconds)) {
    return Math.max(seconds, 0);
  }
  const when = Date.parse(text);
  return Number.isNaN(when) ? undefined : Math.max((when - now) / 1000, 0);
}

export function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}
