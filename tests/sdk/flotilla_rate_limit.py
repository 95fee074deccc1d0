"""The Python SDK against a tenant's submit rate (one a second, burst one):
a submit refused with 429 is sent again after `Retry-After` and then
accepted; three clients allowed one retry each, refused together, share the
one token their retries find, so the others raise `RateLimitError` once
their retry is spent. Prints one JSON line of what each client saw."""

import asyncio
import json
import sys
import time

import httpx

sys.path.insert(0, sys.argv[1])
from flotilla import AsyncFlotilla, Flotilla, RateLimitError  # noqa: E402

SPEC = {"pipeline": "scripted", "actions": [{"type": "wait", "ms": 5}]}


def recorder(log):
    def record(response):
        log.append([response.status_code, time.monotonic(), response.headers.get("retry-after")])

    return record


def patient():
    log = []
    client = Flotilla(max_retries=3, http_client=httpx.Client(event_hooks={"response": [recorder(log)]}))
    client.tasks.submit("first", **SPEC)
    accepted = client.tasks.submit("second", **SPEC)
    return {"responses": log, "accepted": accepted.id}


async def impatient(index):
    log = []

    async def record(response):
        recorder(log)(response)

    http = httpx.AsyncClient(event_hooks={"response": [record]})
    async with AsyncFlotilla(max_retries=1, http_client=http) as client:
        try:
            task = await client.tasks.submit(f"racing {index}", **SPEC)
            outcome = {"accepted": task.id}
        except RateLimitError as e:
            outcome = {"error": type(e).__name__, "code": e.code, "status": e.status, "retry_after": e.retry_after}
    return dict(outcome, responses=log)


async def race():
    return await asyncio.gather(*(impatient(i) for i in range(3)))


print(json.dumps({"patient": patient(), "racing": asyncio.run(race())}))
