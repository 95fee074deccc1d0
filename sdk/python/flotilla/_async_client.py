"""The asynchronous client, :class:`AsyncFlotilla`, on ``httpx.AsyncClient``:
the same calls as :class:`flotilla.Flotilla`, awaited; lists and streams
are async iterators."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional

import httpx

from . import _operations as ops
from . import models
from ._client import DEFAULT_TIMEOUT, MAX_RECONNECTS, STREAM_READ_TIMEOUT
from ._config import resolve
from ._progress import BatchProgress, BatchTally, progress_of_view
from ._retry import RetryPolicy, parse_retry_after
from ._sse import FrameReader, StreamEvent
from .errors import APIConnectionError, StreamEndedError, WaitTimeoutError, error_from_response


class AsyncFlotilla:
    """An asynchronous client of the Flotilla API; see :class:`flotilla.Flotilla`."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        timeout: float = DEFAULT_TIMEOUT,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        settings = resolve(base_url, api_key)
        self.base_url = settings.base_url
        self.retry = RetryPolicy(max_retries=max_retries, max_retry_wait=max_retry_wait)
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._headers = {"Authorization": f"Bearer {settings.api_key}", "Accept": "application/json"}
        self.tasks = AsyncTasks(self)
        self.batches = AsyncBatches(self)
        self.schedules = AsyncSchedules(self)
        self.usage = AsyncUsage(self)
        self.webhooks = AsyncWebhooks(self)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncFlotilla":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self._http.request(method, self.base_url + path, headers=self._headers, **kwargs)
            except httpx.TransportError as e:
                raise APIConnectionError(f"the API at {self.base_url} is unreachable ({e})") from e
            if response.is_success:
                return response
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            delay = self.retry.delay(attempt, response.status_code, retry_after)
            if delay is None:
                raise error_from_response(response.status_code, response.text, retry_after)
            attempt += 1
            await asyncio.sleep(delay)

    async def _call(self, call: ops.Call) -> Any:
        response = await self._send(call.method, call.path, params=call.params, json=call.json)
        if not response.content:
            return None
        body = response.json()
        return call.model.model_validate(body) if call.model else body

    async def _pages(self, listing: ops.Listing) -> AsyncIterator[Any]:
        params: Dict[str, Any] = dict(listing.params)
        while True:
            page = (await self._send("GET", listing.path, params=params)).json()
            for item in page.get(listing.items) or []:
                yield listing.model.model_validate(item) if listing.model else item
            cursor = page.get("next_cursor")
            if not cursor:
                return
            params["cursor"] = cursor

    async def _follow(
        self, path: str, last_id: Optional[str], stop_at_terminal: bool, finished: Callable[[], Awaitable[bool]]
    ) -> AsyncIterator[StreamEvent]:
        failures = 0
        while True:
            headers = dict(self._headers, Accept="text/event-stream")
            if last_id:
                headers["Last-Event-ID"] = last_id
            timeout = httpx.Timeout(DEFAULT_TIMEOUT, read=STREAM_READ_TIMEOUT)
            reader = FrameReader()
            try:
                response = await self._open_stream(path, headers, timeout)
                try:
                    async for line in response.aiter_lines():
                        event = reader.feed(line)
                        if event is None:
                            continue
                        failures, last_id = 0, event.id or last_id
                        yield event
                        if stop_at_terminal and event.is_terminal:
                            return
                finally:
                    await response.aclose()
            except (httpx.TransportError, APIConnectionError):
                pass  # resumed below, after the last event received
            if await finished():
                return
            failures += 1
            if failures > MAX_RECONNECTS:
                raise StreamEndedError(f"the event stream {path} kept closing before its end")
            await asyncio.sleep(min(0.2 * 2**failures, 5.0))

    async def _open_stream(self, path: str, headers: Dict[str, str], timeout: httpx.Timeout) -> httpx.Response:
        attempt = 0
        while True:
            request = self._http.build_request("GET", self.base_url + path, headers=headers, timeout=timeout)
            try:
                response = await self._http.send(request, stream=True)
            except httpx.TransportError as e:
                raise APIConnectionError(f"the API at {self.base_url} is unreachable ({e})") from e
            if response.is_success:
                return response
            await response.aread()
            await response.aclose()
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            delay = self.retry.delay(attempt, response.status_code, retry_after)
            if delay is None:
                raise error_from_response(response.status_code, response.text, retry_after)
            attempt += 1
            await asyncio.sleep(delay)


class _AsyncResource:
    def __init__(self, client: AsyncFlotilla) -> None:
        self._client = client


async def _never() -> bool:
    return False


class AsyncTasks(_AsyncResource):
    async def submit(self, prompt: Optional[str] = None, **spec: Any) -> models.TaskAccepted:
        return await self._client._call(ops.submit_task(dict(spec, prompt=prompt)))

    async def get(self, task_id: str) -> models.TaskRecord:
        return await self._client._call(ops.get_task(task_id))

    def list(
        self, *, status: Optional[str] = None, batch: Optional[str] = None, page_size: Optional[int] = None
    ) -> AsyncIterator[models.TaskRecord]:
        return self._client._pages(ops.list_tasks(status, batch, page_size))

    async def cancel(self, task_id: str) -> models.Cancelled:
        return await self._client._call(ops.cancel_task(task_id))

    async def approve(self, task_id: str, message: Optional[str] = None) -> models.InputAccepted:
        return await self._client._call(ops.answer_task(task_id, "approve", message))

    async def deny(self, task_id: str, message: Optional[str] = None) -> models.InputAccepted:
        return await self._client._call(ops.answer_task(task_id, "deny", message))

    def events(self, task_id: str, *, after: Optional[int] = None) -> AsyncIterator[StreamEvent]:
        last = str(after) if after is not None else None
        return self._client._follow(ops.task_events_path(task_id), last, True, _never)

    async def wait(
        self,
        task_id: str,
        *,
        timeout: Optional[float] = None,
        on_event: Optional[Callable[[StreamEvent], None]] = None,
    ) -> models.TaskRecord:
        deadline = None if timeout is None else time.monotonic() + timeout
        async for event in self.events(task_id):
            if on_event is not None:
                on_event(event)
            if deadline is not None and time.monotonic() > deadline and not event.is_terminal:
                raise WaitTimeoutError(f"task {task_id} did not end within {timeout} s")
        return await self.get(task_id)


class AsyncBatches(_AsyncResource):
    async def submit(
        self, tasks: List[Mapping[str, Any]], defaults: Optional[Mapping[str, Any]] = None
    ) -> models.BatchAccepted:
        return await self._client._call(ops.submit_batch(tasks, defaults))

    async def get(self, batch_id: str) -> models.BatchView:
        return await self._client._call(ops.get_batch(batch_id))

    async def cancel(self, batch_id: str) -> models.BatchCancelled:
        return await self._client._call(ops.cancel_batch(batch_id))

    def tasks(self, batch_id: str, *, page_size: Optional[int] = None) -> AsyncIterator[models.TaskRecord]:
        return self._client.tasks.list(batch=batch_id, page_size=page_size)

    def events(self, batch_id: str, *, after: Optional[str] = None) -> AsyncIterator[StreamEvent]:
        async def finished() -> bool:
            return (await self.get(batch_id)).finished_at is not None

        return self._client._follow(ops.batch_events_path(batch_id), after, False, finished)

    async def wait(
        self,
        batch_id: str,
        *,
        on_progress: Optional[Callable[[BatchProgress], None]] = None,
        timeout: Optional[float] = None,
    ) -> models.BatchView:
        deadline = None if timeout is None else time.monotonic() + timeout
        tally = BatchTally(total=(await self.get(batch_id)).total)
        async for event in self.events(batch_id):
            if tally.record(event) and on_progress is not None:
                on_progress(tally.progress())
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(f"batch {batch_id} did not end within {timeout} s")
        view = await self.get(batch_id)
        final = progress_of_view(view)
        if on_progress is not None and final != tally.progress():
            on_progress(final)
        return view


class AsyncSchedules(_AsyncResource):
    async def create(self, cron: str, task: Mapping[str, Any], **fields: Any) -> models.Schedule:
        return await self._client._call(ops.create_schedule(dict(fields, cron=cron, task=dict(task))))

    def list(self, *, page_size: Optional[int] = None) -> AsyncIterator[models.Schedule]:
        return self._client._pages(ops.list_schedules(page_size))

    async def get(self, schedule_id: str) -> models.Schedule:
        return await self._client._call(ops.get_schedule(schedule_id))

    async def update(self, schedule_id: str, **fields: Any) -> models.Schedule:
        return await self._client._call(ops.update_schedule(schedule_id, fields))

    async def pause(self, schedule_id: str) -> models.Schedule:
        return await self.update(schedule_id, paused=True)

    async def resume(self, schedule_id: str) -> models.Schedule:
        return await self.update(schedule_id, paused=False)

    async def delete(self, schedule_id: str) -> None:
        await self._client._call(ops.delete_schedule(schedule_id))


class AsyncUsage(_AsyncResource):
    async def get(self, start: Optional[str] = None, end: Optional[str] = None) -> models.UsageReport:
        return await self._client._call(ops.get_usage(start, end))


class AsyncWebhooks(_AsyncResource):
    async def create(self, url: str, events: List[str], **fields: Any) -> models.EndpointCreated:
        return await self._client._call(ops.create_webhook(dict(fields, url=url, events=events)))

    def list(self, *, page_size: Optional[int] = None) -> AsyncIterator[models.Endpoint]:
        return self._client._pages(ops.list_webhooks(page_size))

    async def get(self, webhook_id: str) -> models.Endpoint:
        return await self._client._call(ops.get_webhook(webhook_id))

    async def update(self, webhook_id: str, **fields: Any) -> models.Endpoint:
        return await self._client._call(ops.update_webhook(webhook_id, fields))

    async def delete(self, webhook_id: str) -> None:
        await self._client._call(ops.delete_webhook(webhook_id))

    async def rotate_secret(self, webhook_id: str) -> models.SecretRotated:
        return await self._client._call(ops.rotate_webhook_secret(webhook_id))
