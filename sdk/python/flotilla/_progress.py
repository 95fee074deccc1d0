"""What the wait helpers report and decide, shared by the sync and async
clients: a batch's progress counted from its event stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Set

from ._sse import StreamEvent


@dataclass(frozen=True)
class BatchProgress:
    """How far a batch is: ``ended`` of ``total`` tasks have ended, by outcome."""

    total: int
    ended: int
    succeeded: int
    failed: int
    cancelled: int

    @property
    def done(self) -> bool:
        return self.ended >= self.total


@dataclass
class BatchTally:
    """Counts each task of a batch once, at its terminal event."""

    total: int
    _ended: Set[str] = field(default_factory=set)
    _outcomes: Dict[str, int] = field(default_factory=dict)

    def record(self, event: StreamEvent) -> bool:
        """Counts ``event`` when it ends a task not seen ending before;
        answers whether it did."""
        if not event.is_terminal or event.task_id is None or event.task_id in self._ended:
            return False
        self._ended.add(event.task_id)
        self._outcomes[event.type] = self._outcomes.get(event.type, 0) + 1
        return True

    def progress(self) -> BatchProgress:
        return BatchProgress(
            total=self.total,
            ended=len(self._ended),
            succeeded=self._outcomes.get("succeeded", 0),
            failed=self._outcomes.get("failed", 0),
            cancelled=self._outcomes.get("cancelled", 0),
        )


def progress_of_view(view) -> BatchProgress:
    """A batch's progress from its record (``GET /v1/batches/{id}``)."""
    counts = view.counts
    succeeded, failed, cancelled = counts.succeeded, counts.failed, counts.cancelled
    return BatchProgress(
        total=view.total,
        ended=succeeded + failed + cancelled,
        succeeded=succeeded,
        failed=failed,
        cancelled=cancelled,
    )
