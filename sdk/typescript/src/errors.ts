/**
 * Typed errors: every failed call throws one of these. An error answer of
 * the API (`{"error": {"code", "message", "field"}}`) becomes an
 * `APIStatusError` subclass chosen by its HTTP status, with the API's
 * stable `code` kept as it was sent.
 */

export class FlotillaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The client cannot be built: no API key, or an unusable base URL. */
export class ConfigurationError extends FlotillaError {}

/** Nothing answered at the API's address, or the connection broke. */
export class APIConnectionError extends FlotillaError {}

/** An event stream kept closing before its end, past the reconnection cap. */
export class StreamEndedError extends FlotillaError {}

/** A wait helper ran out of time before the task or batch ended. */
export class WaitTimeoutError extends FlotillaError {}

/** A webhook delivery whose signature, timestamp or headers do not verify. */
export class InvalidSignatureError extends FlotillaError {}

/**
 * The API answered with an error status: `code` is its stable error code
 * (`validation_failed`, `not_found`, `rate_limited`, …), `field` the request
 * field it names, `retryAfter` the seconds it asked to wait (429 and 503).
 */
export class APIStatusError extends FlotillaError {
  readonly status: number;
  readonly code: string;
  readonly field: string | undefined;
  readonly retryAfter: number | undefined;
  readonly body: unknown;

  constructor(status: number, code: string, message: string, field?: string, retryAfter?: number, body?: unknown) {
    super(field ? `${code}: ${message} (field ${field})` : `${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.field = field;
    this.retryAfter = retryAfter;
    this.body = body;
  }
}

/** 400: the request is malformed or invalid; nothing was changed. */
export class BadRequestError extends APIStatusError {}
/** 401: the key is missing or unknown. */
export class AuthenticationError extends APIStatusError {}
/** 403: the key may not make this call (a read key writing). */
export class PermissionDeniedError extends APIStatusError {}
/** 404: no such resource for this tenant. */
export class NotFoundError extends APIStatusError {}
/** 409: the resource is not in a state that allows the call. */
export class ConflictError extends APIStatusError {}
/** 429: a rate limit or quota refused the call (`rate_limited`, `quota_exceeded`). */
export class RateLimitError extends APIStatusError {}
/** 5xx other than 503. */
export class InternalServerError extends APIStatusError {}
/** 503: the API cannot reach its store right now. */
export class ServiceUnavailableError extends APIStatusError {}

const BY_STATUS: Record<number, typeof APIStatusError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  429: RateLimitError,
  503: ServiceUnavailableError,
};

/** The typed error for an error answer, falling back to the HTTP status when the body is not the API's JSON. */
export function errorFromResponse(status: number, text: string, retryAfter: number | undefined): APIStatusError {
  let body: unknown = undefined;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  const detail = (body as { error?: unknown } | undefined)?.error;
  let code = `http_${status}`;
  let message = text.trim().split("\n")[0]?.slice(0, 200) || "no message";
  let field: string | undefined;
  if (detail && typeof detail === "object") {
    const d = detail as Record<string, unknown>;
    code = typeof d.code === "string" && d.code ? d.code : code;
    message = typeof d.message === "string" ? d.message : "";
    field = typeof d.field === "string" ? d.field : undefined;
  }
  const Kind = BY_STATUS[status] ?? (status >= 500 ? InternalServerError : APIStatusError);
  return new Kind(status, code, message, field, retryAfter, body);
}
