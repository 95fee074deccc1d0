"""Flotilla's Python client: ``Flotilla`` (sync) and ``AsyncFlotilla``
(async), typed models generated from the API's OpenAPI document
(``flotilla.models``), typed errors (``flotilla.errors``) and webhook
verification (``flotilla.webhooks``)."""

from . import models, webhooks
from ._async_client import AsyncFlotilla
from ._client import Flotilla
from ._progress import BatchProgress
from ._sse import StreamEvent
from .errors import (
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    FlotillaError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServiceUnavailableError,
    StreamEndedError,
    WaitTimeoutError,
)

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "AsyncFlotilla",
    "AuthenticationError",
    "BadRequestError",
    "BatchProgress",
    "ConfigurationError",
    "ConflictError",
    "Flotilla",
    "FlotillaError",
    "InternalServerError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "ServiceUnavailableError",
    "StreamEndedError",
    "StreamEvent",
    "WaitTimeoutError",
    "models",
    "webhooks",
]
