"""Drives the Gemini API stand-in with the official `google-genai` SDK,
whose client parses every answer into its own types. argv: base URL, then a
JSON list of case kinds ("content", "browser" or "error"), one per scripted
reply, in order ("browser" asks in the browser environment). The client validates each answer into `GenerateContentResponse` as it
reads it. Prints one JSON object per case."""

import base64
import json
import sys

from google import genai
from google.genai import errors, types

BASE, KINDS = sys.argv[1], json.loads(sys.argv[2])
# The REST reference's `v1beta`, where our client posts (this SDK's default is `v1`).
OPTIONS = types.HttpOptions(base_url=BASE, api_version="v1beta", retry_options=None)
client = genai.Client(api_key="gemini-sdk-check", http_options=OPTIONS)
CONFIG = types.GenerateContentConfig(
    tools=[types.Tool(computer_use=types.ComputerUse(environment=types.Environment.ENVIRONMENT_DESKTOP))],
    thinking_config=types.ThinkingConfig(include_thoughts=True),
)
BROWSER = types.GenerateContentConfig(
    tools=[types.Tool(computer_use=types.ComputerUse(environment=types.Environment.ENVIRONMENT_BROWSER))],
    thinking_config=types.ThinkingConfig(include_thoughts=True),
)

for kind in KINDS:
    if kind in ("content", "browser"):
        config = BROWSER if kind == "browser" else CONFIG
        response = client.models.generate_content(model="gemini-3.6-flash", contents="go", config=config)
        parts = []
        for part in response.candidates[0].content.parts:
            if part.function_call:
                signature = base64.b64encode(part.thought_signature).decode() if part.thought_signature else None
                parts.append(["call", part.function_call.name, part.function_call.args, signature])
            elif part.thought:
                parts.append(["thought", part.text])
            else:
                parts.append(["text", part.text])
        usage = response.usage_metadata
        print(json.dumps({"kind": kind, "finish": response.candidates[0].finish_reason.value, "parts": parts,
                          "usage": [usage.prompt_token_count, usage.candidates_token_count, usage.thoughts_token_count]}))
    else:
        try:
            client.models.generate_content(model="gemini-3.6-flash", contents="go", config=CONFIG)
            print(json.dumps({"kind": kind, "error": None}))
        except errors.APIError as error:
            print(json.dumps({"kind": kind, "status": error.code, "state": error.status, "message": error.message}))
