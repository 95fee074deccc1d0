"""The synchronous client, :class:`Flotilla`, on ``httpx.Client``."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import httpx

from . import _operations as ops
from . import models
from ._config import resolve
from ._progress import BatchProgress, BatchTally, progress_of_view
from ._retry import RetryPolicy, parse_retry_after
from ._sse import FrameReader, StreamEvent
from .errors import APIConnectionError, StreamEndedError, WaitTimeoutError, error_from_response

#: How long a plain call may take, in seconds.
DEFAULT_TIMEOUT = 30.0
#: How long an event stream may stay silent (the API sends a comment every 15 s).
STREAM_READ_TIMEOUT = 60.0
#: Reconnections in a row, without an event between them, before a stream gives up.
MAX_RECONNECTS = 8


class Flotilla:
    """A client of the Flotilla API.

    ``base_url`` and ``api_key`` default to ``FLOTILLA_API_URL`` and
    ``FLOTILLA_API_KEY``. Calls refused with 429 or 503 are sent again
    after the API's ``Retry-After``, at most ``max_retries`` times, and never
    after a wait longer than ``max_retry_wait`` seconds.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        timeout: float = DEFAULT_TIMEOUT,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        settings = resolve(base_url, api_key)
        self.base_url = settings.base_url
        self.retry = RetryPolicy(max_retries=max_retries, max_retry_wait=max_retry_wait)
        self._http = http_client or httpx.Client(timeout=timeout)
        self._headers = {"Authorization": f"Bearer {settings.api_key}", "Accept": "application/json"}
        self.tasks = Tasks(self)
        self.batches = Batches(self)
        self.schedules = Schedules(self)
        self.usage = Usage(self)
        self.webhooks = Webhooks(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Flotilla":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # Sending.
    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Sends a request, retrying 429 and 503 as the policy allows;
        answers a 2xx response or raises the typed error."""
        attempt = 0
        while True:
            try:
                response = self._http.request(method, self.base_url + path, headers=self._headers, **kwargs)
            except httpx.TransportError as e:
                raise APIConnectionError(f"the API at {self.base_url} is unreachable ({e})") from e
            if response.is_success:
                return response
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            delay = self.retry.delay(attempt, response.status_code, retry_after)
            if delay is None:
                raise error_from_response(response.status_code, response.text, retry_after)
            attempt += 1
            time.sleep(delay)

    def _call(self, call: ops.Call) -> Any:
        response = self._send(call.method, call.path, params=call.params, json=call.json)
        if not response.content:
            return None
        body = response.json()
        return call.model.model_validate(body) if call.model else body

    def _pages(self, listing: ops.Listing) -> Iterator[Any]:
        params: Dict[str, Any] = dict(listing.params)
        while True:
            page = self._send("GET", listing.path, params=params).json()
            for item in page.get(listing.items) or []:
                yield listing.model.model_validate(item) if listing.model else item
            cursor = page.get("next_cursor")
            if not cursor:
                return
            params["cursor"] = cursor

    def _follow(
        self, path: str, last_id: Optional[str], stop_at_terminal: bool, finished: Callable[[], bool]
    ) -> Iterator[StreamEvent]:
        """A stream's events, reconnecting with ``Last-Event-ID`` when it
        closes or breaks, until a terminal event (``stop_at_terminal``: a
        task's stream) or until ``finished()`` holds after a close."""
        failures = 0
        while True:
            headers = dict(self._headers, Accept="text/event-stream")
            if last_id:
                headers["Last-Event-ID"] = last_id
            timeout = httpx.Timeout(DEFAULT_TIMEOUT, read=STREAM_READ_TIMEOUT)
            reader = FrameReader()
            try:
                response = self._open_stream(path, headers, timeout)
                try:
                    for line in response.iter_lines():
                        event = reader.feed(line)
                        if event is None:
                            continue
                        failures, last_id = 0, event.id or last_id
                        yield event
                        if stop_at_terminal and event.is_terminal:
                            return
                finally:
                    response.close()
            except (httpx.TransportError, APIConnectionError):
                pass  # resumed below, after the last event received
            if finished():
                return
            failures += 1
            if failures > MAX_RECONNECTS:
                raise StreamEndedError(f"the event stream {path} kept closing before its end")
            time.sleep(min(0.2 * 2**failures, 5.0))

    def _open_stream(self, path: str, headers: Dict[str, str], timeout: httpx.Timeout) -> httpx.Response:
        attempt = 0
        while True:
            request = self._http.build_request("GET", self.base_url + path, headers=headers, timeout=timeout)
            try:
                response = self._http.send(request, stream=True)
            except httpx.TransportError as e:
                raise APIConnectionError(f"the API at {self.base_url} is unreachable ({e})") from e
            if response.is_success:
                return response
            response.read()
            response.close()
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            delay = self.retry.delay(attempt, response.status_code, retry_after)
            if delay is None:
                raise error_from_response(response.status_code, response.text, retry_after)
            attempt += 1
            time.sleep(delay)


class _Resource:
    def __init__(self, client: Flotilla) -> None:
        self._client = client


class Tasks(_Resource):
    def submit(self, prompt: Optional[str] = None, **spec: Any) -> models.TaskAccepted:
        """Submits one task; ``spec`` takes any field of a task spec."""
        return self._client._call(ops.submit_task(dict(spec, prompt=prompt)))

    def get(self, task_id: str) -> models.TaskRecord:
        return self._client._call(ops.get_task(task_id))

    def list(
        self, *, status: Optional[str] = None, batch: Optional[str] = None, page_size: Optional[int] = None
    ) -> Iterator[models.TaskRecord]:
        """Every task matching the filters, newest first, page after page."""
        return self._client._pages(ops.list_tasks(status, batch, page_size))

    def cancel(self, task_id: str) -> models.Cancelled:
        return self._client._call(ops.cancel_task(task_id))

    def approve(self, task_id: str, message: Optional[str] = None) -> models.InputAccepted:
        return self._client._call(ops.answer_task(task_id, "approve", message))

    def deny(self, task_id: str, message: Optional[str] = None) -> models.InputAccepted:
        return self._client._call(ops.answer_task(task_id, "deny", message))

    def events(self, task_id: str, *, after: Optional[int] = None) -> Iterator[StreamEvent]:
        """The task's events, stored history first, until its terminal event;
        a dropped connection resumes after the last event received."""
        last = str(after) if after is not None else None
        return self._client._follow(ops.task_events_path(task_id), last, True, lambda: False)

    def wait(
        self,
        task_id: str,
        *,
        timeout: Optional[float] = None,
        on_event: Optional[Callable[[StreamEvent], None]] = None,
    ) -> models.TaskRecord:
        """Follows the task until it ends and answers its final record;
        ``timeout`` (seconds) is checked as events arrive."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for event in self.events(task_id):
            if on_event is not None:
                on_event(event)
            if deadline is not None and time.monotonic() > deadline and not event.is_terminal:
                raise WaitTimeoutError(f"task {task_id} did not end within {timeout} s")
        return self.get(task_id)


class Batches(_Resource):
    def submit(
        self, tasks: List[Mapping[str, Any]], defaults: Optional[Mapping[str, Any]] = None
    ) -> models.BatchAccepted:
        """Submits many tasks at once; each spec is laid over ``defaults``."""
        return self._client._call(ops.submit_batch(tasks, defaults))

    def get(self, batch_id: str) -> models.BatchView:
        return self._client._call(ops.get_batch(batch_id))

    def cancel(self, batch_id: str) -> models.BatchCancelled:
        return self._client._call(ops.cancel_batch(batch_id))

    def tasks(self, batch_id: str, *, page_size: Optional[int] = None) -> Iterator[models.TaskRecord]:
        return self._client.tasks.list(batch=batch_id, page_size=page_size)

    def events(self, batch_id: str, *, after: Optional[str] = None) -> Iterator[StreamEvent]:
        """Every event of the batch's tasks until all of them have ended."""
        finished = lambda: self.get(batch_id).finished_at is not None  # noqa: E731
        return self._client._follow(ops.batch_events_path(batch_id), after, False, finished)

    def wait(
        self,
        batch_id: str,
        *,
        on_progress: Optional[Callable[[BatchProgress], None]] = None,
        timeout: Optional[float] = None,
    ) -> models.BatchView:
        """Follows the batch until every task has ended, calling
        ``on_progress`` each time one ends; answers the batch's final record."""
        deadline = None if timeout is None else time.monotonic() + timeout
        tally = BatchTally(total=self.get(batch_id).total)
        for event in self.events(batch_id):
            if tally.record(event) and on_progress is not None:
                on_progress(tally.progress())
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(f"batch {batch_id} did not end within {timeout} s")
        view = self.get(batch_id)
        final = progress_of_view(view)
        if on_progress is not None and final != tally.progress():
            on_progress(final)
        return view


class Schedules(_Resource):
    def create(self, cron: str, task: Mapping[str, Any], **fields: Any) -> models.Schedule:
        """Creates a schedule: ``cron`` (five fields), the ``task`` each run
        enqueues, and optionally ``timezone``, ``overlap``, ``paused``."""
        return self._client._call(ops.create_schedule(dict(fields, cron=cron, task=dict(task))))

    def list(self, *, page_size: Optional[int] = None) -> Iterator[models.Schedule]:
        return self._client._pages(ops.list_schedules(page_size))

    def get(self, schedule_id: str) -> models.Schedule:
        return self._client._call(ops.get_schedule(schedule_id))

    def update(self, schedule_id: str, **fields: Any) -> models.Schedule:
        return self._client._call(ops.update_schedule(schedule_id, fields))

    def pause(self, schedule_id: str) -> models.Schedule:
        return self.update(schedule_id, paused=True)

    def resume(self, schedule_id: str) -> models.Schedule:
        return self.update(schedule_id, paused=False)

    def delete(self, schedule_id: str) -> None:
        self._client._call(ops.delete_schedule(schedule_id))


class Usage(_Resource):
    def get(self, start: Optional[str] = None, end: Optional[str] = None) -> models.UsageReport:
        """What the tenant used per day from ``start`` to ``end`` (days like
        ``2026-01-31``; the last 30 days by default), and its limits."""
        return self._client._call(ops.get_usage(start, end))


class Webhooks(_Resource):
    def create(self, url: str, events: List[str], **fields: Any) -> models.EndpointCreated:
        """Registers an endpoint; the answer carries its signing ``secret``."""
        return self._client._call(ops.create_webhook(dict(fields, url=url, events=events)))

    def list(self, *, page_size: Optional[int] = None) -> Iterator[models.Endpoint]:
        return self._client._pages(ops.list_webhooks(page_size))

    def get(self, webhook_id: str) -> models.Endpoint:
        return self._client._call(ops.get_webhook(webhook_id))

    def update(self, webhook_id: str, **fields: Any) -> models.Endpoint:
        return self._client._call(ops.update_webhook(webhook_id, fields))

    def delete(self, webhook_id: str) -> None:
        self._client._call(ops.delete_webhook(webhook_id))

    def rotate_secret(self, webhook_id: str) -> models.SecretRotated:
        return self._client._call(ops.rotate_webhook_secret(webhook_id))
