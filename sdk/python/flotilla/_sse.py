"""Server-Sent Events read line by line into frames, and the event a
stream yields. Used by the sync and async clients alike."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

#: A task's last event is one of these.
TERMINAL_TYPES = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class StreamEvent:
    """One event of a stream: ``id`` is its position (what ``Last-Event-ID``
    resumes after), ``type`` its kind (``queued``, ``started``, ...,
    ``succeeded``), ``data`` the event's JSON as the API stores it."""

    id: Optional[str]
    type: str
    data: Dict[str, Any]

    @property
    def task_id(self) -> Optional[str]:
        return self.data.get("task_id")

    @property
    def seq(self) -> Optional[int]:
        return self.data.get("seq")

    @property
    def is_terminal(self) -> bool:
        """Whether this event ends its task."""
        return self.type in TERMINAL_TYPES


@dataclass
class FrameReader:
    """Turns the lines of an event stream into events (comments and
    keep-alives are skipped)."""

    _id: Optional[str] = None
    _event: Optional[str] = None
    _data: List[str] = field(default_factory=list)

    def feed(self, line: str) -> Optional[StreamEvent]:
        """Reads one line (without its end); answers the event a blank
        line completes."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "id":
            self._id = value
        elif name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> Optional[StreamEvent]:
        if not self._data and self._event is None:
            return None
        text = "\n".join(self._data)
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            data = {"raw": text}
        if not isinstance(data, dict):
            data = {"value": data}
        kind = self._event or str(data.get("type", "message"))
        event = StreamEvent(id=self._id, type=kind, data=data)
        self._event, self._data = None, []
        return event
