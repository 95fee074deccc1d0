"""Drives the Responses API stand-in with the official `openai` SDK and
validates every answer with the SDK's own types. argv: base URL, then a JSON
list of case kinds ("response" or "error"), one per scripted reply, in
order. Prints one JSON object per case."""

import json
import sys

import openai
from openai.types.responses import Response

BASE, KINDS = sys.argv[1], json.loads(sys.argv[2])
client = openai.OpenAI(api_key="sk-sdk-check", base_url=BASE, max_retries=0)
REQUEST = dict(model="gpt-6-astra", tools=[{"type": "computer"}], input="go", reasoning={"summary": "auto"})

for kind in KINDS:
    if kind == "response":
        raw = client.responses.with_raw_response.create(**REQUEST)
        response = Response.model_validate(raw.http_response.json())
        items = []
        for item in response.output:
            if item.type == "computer_call":
                actions = [a.type for a in (item.actions or [])] or [item.action.type]
                items.append(["computer_call", item.call_id, actions, [c.id for c in item.pending_safety_checks]])
            elif item.type == "function_call":
                items.append(["function_call", item.call_id, item.name, json.loads(item.arguments)])
            else:
                items.append([item.type])
        print(json.dumps({"kind": kind, "id": response.id, "items": items, "output_text": response.output_text,
                          "input_tokens": response.usage.input_tokens}))
    else:
        try:
            client.responses.create(**REQUEST)
            print(json.dumps({"kind": kind, "error": None}))
        except openai.APIStatusError as error:
            print(json.dumps({"kind": kind, "status": error.status_code, "type": error.type, "message": error.message}))
