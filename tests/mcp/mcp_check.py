"""Drives the Flotilla MCP server with the official MCP Python client (PyPI `mcp`).

    python mcp_check.py stdio '<json>'   # starts `flotilla mcp` as the client's subprocess
    python mcp_check.py http '<json>'    # connects to the API's /mcp

The JSON names what to do: `command` (stdio: the flotilla binary), `url`
(http: the /mcp URL), `api` and `key` (the key may be null: none is sent),
`spec` (a task to submit and follow, or null), `foreign` (another tenant's
task id to read, or null). Prints one JSON line of what the client saw, for
tests/tests/it/mcp.rs to check.
"""

import asyncio
import base64
import json
import os
import sys

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def wire(result):
    """A result as the wire carried it (camelCase keys)."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def target(mode, job):
    if mode == "stdio":
        env = {"PATH": os.environ.get("PATH", ""), "FLOTILLA_API_URL": job["api"]}
        if job["key"] is not None:
            env["FLOTILLA_API_KEY"] = job["key"]
        return StdioServerParameters(command=job["command"], args=["mcp"], env=env)
    headers = {} if job["key"] is None else {"Authorization": f"Bearer {job['key']}"}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
    return streamable_http_client(job["url"], http_client=http)


async def follow(client, spec, seen):
    submitted = wire(await client.call_tool("submit_task", spec))
    seen["submitted"] = submitted
    task_id = submitted["structuredContent"]["id"]
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": json.loads(message) if message else None})

    waited = wire(await client.call_tool("wait_for_task", {"id": task_id, "timeout_s": 120}, progress_callback=on_progress))
    seen["waited"] = waited
    seen["progress"] = progress
    shot = wire(await client.call_tool("get_screenshot", {"id": task_id}))
    images = [block for block in shot["content"] if block["type"] == "image"]
    seen["screenshot"] = {
        "is_error": shot.get("isError", False),
        "listed": shot.get("structuredContent"),
        "images": [
            {"mime": image["mimeType"], "png": base64.b64decode(image["data"])[:8] == b"\x89PNG\r\n\x1a\n"}
            for image in images
        ],
    }
    resource = wire(await client.read_resource(f"flotilla://tasks/{task_id}"))
    seen["resource"] = json.loads(resource["contents"][0]["text"])
    seq = seen["screenshot"]["listed"]["seq"]
    image = wire(await client.read_resource(f"flotilla://tasks/{task_id}/screenshots/{seq}"))
    blob = image["contents"][0]
    seen["screenshot_resource"] = {"mime": blob.get("mimeType"), "png": base64.b64decode(blob["blob"])[:8] == b"\x89PNG\r\n\x1a\n"}


def describe(err):
    """An error, the ones a task group gathered spelled out."""
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in err.exceptions)
    return f"{type(err).__name__}: {err}"


async def run(mode, job):
    seen = {}
    try:
        async with Client(target(mode, job)) as client:
            seen["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)
            if job.get("spec") is not None:
                await follow(client, job["spec"], seen)
            if job.get("foreign") is not None:
                seen["foreign"] = wire(await client.call_tool("get_task", {"id": job["foreign"]}))
    except Exception as err:  # what a client of a server that refused it sees
        seen["refused"] = describe(err)
    return seen


def main():
    mode, job = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(asyncio.run(run(mode, job))))


if __name__ == "__main__":
    main()
