"""Drives the E2B stand-in with the official E2B SDK (PyPI `e2b`, pointed at
it with E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY): creates a
`desktop` sandbox, runs commands, writes and reads a file, and builds the
Desktop SDK's (`e2b_desktop`) stream URL for it; prints one JSON line."""

import json

from e2b import CommandExitException, Sandbox
from e2b_desktop.main import _VNCServer

KEY = "abcdEFGH12345678"

sandbox = Sandbox.create(template="desktop", timeout=120)
out = {"sandbox_id": sandbox.sandbox_id}
out["geometry"] = sandbox.commands.run("xdotool getdisplaygeometry").stdout.strip()
# A multipart upload (the SDK's default for text) and a raw one.
sandbox.files.write("notes/sdk.txt", "written by the sdk")
sandbox.files.write("notes/raw.bin", b"\x00raw\xff", use_octet_stream=True)
out["raw"] = sandbox.files.read("notes/raw.bin", format="bytes").hex()
out["cat"] = sandbox.commands.run("cat notes/sdk.txt").stdout
out["read"] = sandbox.files.read("notes/sdk.txt")
try:
    sandbox.commands.run("echo failing >&2; exit 3")
    out["exit_code"] = 0
except CommandExitException as error:
    out["exit_code"] = error.exit_code
    out["stderr"] = error.stderr
out["running"] = sandbox.is_running()
out["stream_url"] = _VNCServer(sandbox).get_url(view_only=True, auth_key=KEY)
out["stream_key"] = KEY
sandbox.kill()
print(json.dumps(out))
