"""Drives the Messages API stand-in with the official `anthropic` SDK and
validates every answer with the SDK's own types. argv: base URL, then a JSON
list of case kinds ("message", "browser", "stream" or "error"), one per
scripted reply, in order; a "browser" case asks with the browser toolset and
validates its member calls as the SDK's browser blocks. Prints one JSON
object per case."""

import json
import sys

import anthropic
from anthropic.types import BrowserToolUseBlock, ComputerToolUseBlock, Message, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from pydantic import TypeAdapter

BASE, KINDS = sys.argv[1], json.loads(sys.argv[2])
client = anthropic.Anthropic(api_key="sk-ant-sdk-check", base_url=BASE, max_retries=0)
REQUEST = dict(
    model="claude-opus-5-5",
    max_tokens=16000,
    messages=[{"role": "user", "content": "go"}],
    tools=[{"type": "computer_toolset_20260801", "configs": {"zoom": {"enabled": False}}}],
    thinking={"type": "adaptive", "display": "summarized"},
)
BROWSER_REQUEST = dict(REQUEST, tools=[{"type": "browser_toolset_20260801", "configs": {"new_tab": {"enabled": False}}}])
members = TypeAdapter(ComputerToolUseBlock)
browser_members = TypeAdapter(BrowserToolUseBlock)
events = TypeAdapter(RawMessageStreamEvent)


def blocks(message):
    out = []
    for block in message.content:
        if block.type == "tool_use" and block.toolset_name == "computer":
            member = members.validate_python(block.model_dump())
            out.append(["member", member.name, type(member.input).__name__])
        elif block.type == "tool_use" and block.toolset_name == "browser":
            member = browser_members.validate_python(block.model_dump())
            out.append(["browser", member.name, type(member.input).__name__])
        else:
            out.append([block.type, getattr(block, "name", None), None])
    return out


for kind in KINDS:
    if kind in ("message", "browser"):
        raw = client.messages.with_raw_response.create(**(BROWSER_REQUEST if kind == "browser" else REQUEST))
        message = Message.model_validate(raw.http_response.json())
        print(json.dumps({"kind": kind, "stop_reason": message.stop_reason, "blocks": blocks(message),
                          "input_tokens": message.usage.input_tokens}))
    elif kind == "stream":
        seen, started, stop_reason = [], [], None
        for event in client.messages.create(stream=True, **REQUEST):
            event = events.validate_python(event.model_dump())
            seen.append(event.type)
            if event.type == "content_block_start":
                started.append([event.content_block.type, getattr(event.content_block, "name", None), None])
            elif event.type == "message_delta":
                stop_reason = event.delta.stop_reason
        print(json.dumps({"kind": kind, "events": seen, "stop_reason": stop_reason, "blocks": started}))
    else:
        try:
            client.messages.create(**REQUEST)
            print(json.dumps({"kind": kind, "error": None}))
        except anthropic.APIStatusError as error:
            body = ErrorResponse.model_validate(error.body)
            print(json.dumps({"kind": kind, "status": error.status_code, "type": body.error.type,
                              "message": body.error.message}))
