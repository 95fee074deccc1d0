"""Retries, typed errors, pagination and event streams, against
``httpx.MockTransport`` answers shaped as the API's."""

import asyncio
import json
import time

import httpx
import pytest

from flotilla import AsyncFlotilla, ConfigurationError, Flotilla, NotFoundError, RateLimitError, models
from flotilla import _operations as ops
from flotilla._retry import RetryPolicy, parse_retry_after

KEY = "flt_unit0000000000000000000000000000000000"


def rate_limited(seconds="0"):
    body = {"error": {"code": "rate_limited", "message": "submit rate exceeded"}}
    return httpx.Response(429, json=body, headers={"Retry-After": seconds})


def task_id(i):
    return f"tsk_{i:026d}"


def cancelled(i):
    return {"id": task_id(i), "status": "cancelled"}


def sync_client(handler, **kwargs):
    return Flotilla("http://api.test", KEY, http_client=httpx.Client(transport=httpx.MockTransport(handler)), **kwargs)


def test_a_429_is_retried_after_retry_after_then_succeeds():
    seen = []

    def handler(request):
        seen.append(time.monotonic())
        return rate_limited("1") if len(seen) == 1 else httpx.Response(200, json=cancelled(1))

    client = sync_client(handler)
    assert client.tasks.cancel(task_id(1)).status == "cancelled"
    assert len(seen) == 2
    assert seen[1] - seen[0] >= 0.95, "the retry waited for Retry-After"


def test_retries_spent_raise_the_typed_error_with_the_api_code():
    calls = []

    def handler(request):
        calls.append(request)
        return rate_limited("0")

    client = sync_client(handler, max_retries=2)
    with pytest.raises(RateLimitError) as raised:
        client.usage.get()
    assert len(calls) == 3
    assert raised.value.code == "rate_limited"
    assert raised.value.status == 429
    assert raised.value.retry_after == 0


def test_a_retry_after_past_the_cap_surfaces_at_once():
    calls = []

    def handler(request):
        calls.append(request)
        return rate_limited("120")

    with pytest.raises(RateLimitError):
        sync_client(handler, max_retry_wait=5).usage.get()
    assert len(calls) == 1


def test_a_404_is_not_retried_and_names_its_code():
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no such task"}})

    with pytest.raises(NotFoundError) as raised:
        sync_client(handler).tasks.get("tsk_x")
    assert (len(calls), raised.value.code, raised.value.message) == (1, "not_found", "no such task")


def test_pages_are_followed_by_next_cursor():
    def handler(request):
        cursor = request.url.params.get("cursor")
        assert request.url.params.get("limit") == "2"
        if cursor is None:
            return httpx.Response(200, json={"tasks": [cancelled(1), cancelled(2)], "next_cursor": task_id(2)})
        assert cursor == task_id(2)
        return httpx.Response(200, json={"tasks": [cancelled(3)], "next_cursor": None})

    listing = ops.Listing("/v1/tasks", "tasks", models.Cancelled, {"limit": 2})
    ids = [t.id for t in sync_client(handler)._pages(listing)]
    assert ids == [task_id(1), task_id(2), task_id(3)]


def frame(seq, kind):
    data = json.dumps({"seq": seq, "task_id": "tsk_1", "type": kind})
    return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n"


def test_a_closed_stream_resumes_after_the_last_event_id():
    resumed_from = []

    def handler(request):
        last = request.headers.get("last-event-id")
        resumed_from.append(last)
        if last is None:
            body = ": keep-alive\n\n" + frame(1, "queued") + frame(2, "started")
        else:
            body = frame(3, "succeeded")
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    events = list(sync_client(handler).tasks.events("tsk_1"))
    assert [(e.seq, e.type) for e in events] == [(1, "queued"), (2, "started"), (3, "succeeded")]
    assert resumed_from == [None, "2"]


def test_the_async_client_retries_and_raises_alike():
    calls = []

    def handler(request):
        calls.append(request)
        return rate_limited("0") if len(calls) < 3 else httpx.Response(200, json=cancelled(7))

    async def run():
        transport = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        async with AsyncFlotilla("http://api.test", KEY, http_client=transport) as client:
            record = await client.tasks.cancel(task_id(7))
            assert record.id == task_id(7)
            limited = AsyncFlotilla("http://api.test", KEY, max_retries=0, http_client=transport)
            with pytest.raises(RateLimitError):
                calls.clear()
                await limited.tasks.cancel(task_id(7))

    asyncio.run(run())


def test_settings_come_from_the_environment_as_the_cli_reads_them(monkeypatch):
    monkeypatch.setenv("FLOTILLA_API_URL", "http://fleet.test:9000/")
    monkeypatch.setenv("FLOTILLA_API_KEY", KEY)
    assert Flotilla().base_url == "http://fleet.test:9000"
    monkeypatch.setenv("FLOTILLA_API_KEY", " ")
    with pytest.raises(ConfigurationError):
        Flotilla()


def test_retry_after_reads_seconds_and_http_dates():
    assert parse_retry_after("3") == 3
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10
    assert parse_retry_after("soon") is None
    policy = RetryPolicy(max_retries=1, max_retry_wait=10)
    assert policy.delay(0, 503, 2.0) == 2.0
    assert policy.delay(1, 503, 2.0) is None
    assert policy.delay(0, 500, 2.0) is None


def test_a_refused_reconnection_is_tried_again_from_the_same_position():
    resumed_from = []

    def handler(request):
        last = request.headers.get("last-event-id")
        resumed_from.append(last)
        if len(resumed_from) == 2:
            raise httpx.ConnectError("connection refused", request=request)
        body = frame(1, "queued") if last is None else frame(2, "succeeded")
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    events = list(sync_client(handler).tasks.events("tsk_1"))
    assert [e.type for e in events] == ["queued", "succeeded"]
    assert resumed_from == [None, "1", "1"]
