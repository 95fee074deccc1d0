"""When to try a call again: 429 and 503 are retried after the API's
``Retry-After`` (or a growing backoff when it sends none), at most
``max_retries`` times and never after a wait longer than ``max_retry_wait``;
then the typed error surfaces."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from typing import Optional

#: The statuses a call is retried on.
RETRIED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    #: How many times a refused call is sent again.
    max_retries: int = 3
    #: The longest wait before a retry, in seconds: a ``Retry-After`` above
    #: it surfaces the error at once instead.
    max_retry_wait: float = 60.0
    #: The first backoff when the answer names no wait, doubled each time.
    backoff: float = 0.5

    def delay(self, attempt: int, status: int, retry_after: Optional[float]) -> Optional[float]:
        """Seconds to wait before retry number ``attempt + 1``, or ``None``
        when the call must not be retried."""
        if status not in RETRIED_STATUSES or attempt >= self.max_retries:
            return None
        if retry_after is None:
            wait = self.backoff * (2**attempt) * (0.75 + random.random() / 2)
        else:
            wait = retry_after
        if wait > self.max_retry_wait:
            return None
        return max(wait, 0.0)


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """``Retry-After`` as seconds: a whole number of seconds or an HTTP date."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    now = time.time() if now is None else now
    return max(when.timestamp() - now, 0.0)
