"""Where the API is and which key to send: arguments first, then
``FLOTILLA_API_URL`` and ``FLOTILLA_API_KEY``, as the ``flotilla`` CLI reads them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from .errors import ConfigurationError

#: Where the API listens unless told otherwise (the CLI's default too).
DEFAULT_API_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Settings:
    base_url: str
    api_key: str


def resolve(
    base_url: Optional[str], api_key: Optional[str], env: Optional[Mapping[str, str]] = None
) -> Settings:
    """The client's settings from its arguments and the environment."""
    env = os.environ if env is None else env
    url = (base_url or env.get("FLOTILLA_API_URL") or DEFAULT_API_URL).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"invalid API URL {url!r}: it must start with http:// or https://")
    key = (api_key if api_key is not None else env.get("FLOTILLA_API_KEY", "")).strip()
    if not key:
        raise ConfigurationError("no API key: pass api_key or set FLOTILLA_API_KEY")
    return Settings(base_url=url, api_key=key)
