"""Typed errors: every failed call raises one of these.

An error answer of the API (`{"error": {"code", "message", "field"}}`)
becomes an :class:`APIStatusError` subclass chosen by its HTTP status, with
the API's stable ``code`` kept as it was sent.
"""

from __future__ import annotations

from typing import Any, Optional


class FlotillaError(Exception):
    """The base of every error this package raises."""


class ConfigurationError(FlotillaError):
    """The client cannot be built: no API key, or an unusable base URL."""


class APIConnectionError(FlotillaError):
    """Nothing answered at the API's address, or the connection broke."""


class StreamEndedError(FlotillaError):
    """An event stream kept closing before its end, past the reconnection cap."""


class WaitTimeoutError(FlotillaError):
    """A wait helper ran out of time before the task or batch ended."""


class APIStatusError(FlotillaError):
    """The API answered with an error status.

    ``code`` is the API's stable error code (``validation_failed``,
    ``not_found``, ``rate_limited``, ...), ``field`` the request field it
    names when there is one, ``retry_after`` the seconds the API asked to
    wait (429 and 503).
    """

    status: int
    code: str
    message: str
    field: Optional[str]
    retry_after: Optional[float]
    body: Any

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
        body: Any = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.body = body
        text = f"{code}: {message}"
        if field:
            text += f" (field {field})"
        super().__init__(text)


class BadRequestError(APIStatusError):
    """400: the request is malformed or invalid; nothing was changed."""


class AuthenticationError(APIStatusError):
    """401: the key is missing or unknown."""


class PermissionDeniedError(APIStatusError):
    """403: the key may not make this call (a read key writing)."""


class NotFoundError(APIStatusError):
    """404: no such resource for this tenant."""


class ConflictError(APIStatusError):
    """409: the resource is not in a state that allows the call."""


class RateLimitError(APIStatusError):
    """429: a rate limit or quota refused the call (``rate_limited``, ``quota_exceeded``)."""


class InternalServerError(APIStatusError):
    """5xx other than 503."""


class ServiceUnavailableError(APIStatusError):
    """503: the API cannot reach its store right now."""


_BY_STATUS = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def error_from_response(status: int, body_text: str, retry_after: Optional[float]) -> APIStatusError:
    """The typed error for an error answer, reading the API's error body
    and falling back to the HTTP status when the body is not the API's JSON."""
    import json

    try:
        body: Any = json.loads(body_text) if body_text else None
    except ValueError:
        body = None
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict):
        code = str(detail.get("code") or f"http_{status}")
        message = str(detail.get("message") or "")
        field = detail.get("field")
    else:
        code = f"http_{status}"
        message = body_text.strip().splitlines()[0][:200] if body_text.strip() else "no message"
        field = None
    cls = _BY_STATUS.get(status, InternalServerError if status >= 500 else APIStatusError)
    return cls(status, code, message, field=field, retry_after=retry_after, body=body)
