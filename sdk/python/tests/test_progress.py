"""A batch's tally counts each task once, at its terminal event."""

from flotilla._progress import BatchTally
from flotilla._sse import FrameReader, StreamEvent


def ev(task, kind):
    return StreamEvent(id=None, type=kind, data={"task_id": task, "type": kind})


def test_each_task_counts_once_by_outcome():
    tally = BatchTally(total=3)
    recorded = [tally.record(e) for e in [ev("a", "started"), ev("a", "succeeded"), ev("a", "succeeded"), ev("b", "failed")]]
    assert recorded == [False, True, False, True]
    progress = tally.progress()
    assert (progress.ended, progress.succeeded, progress.failed, progress.done) == (2, 1, 1, False)


def test_frames_join_data_lines_and_skip_comments():
    reader = FrameReader()
    lines = [": ping", "", "id: 5", "event: reasoning", 'data: {"seq": 5,', 'data: "type": "reasoning"}', ""]
    events = [e for e in map(reader.feed, lines) if e]
    assert [(e.id, e.type, e.seq) for e in events] == [("5", "reasoning", 5)]
