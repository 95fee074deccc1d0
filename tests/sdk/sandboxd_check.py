"""Drives flotilla-sandboxd with the official E2B SDKs, unmodified (PyPI
`e2b` and `e2b-desktop`, pointed at it with E2B_API_URL, E2B_SANDBOX_URL,
E2B_DOMAIN and E2B_API_KEY): a desktop at a resolution, commands with exit
codes and streamed output, files up and down, screenshot, pointer and
keyboard, the stream, timeout, pause and connect, list and kill, and the
URLs it signs for one file. Prints
`STREAM <url>` once the SDK's stream runs and waits for a line on stdin
(the Rust test opens the URL in a browser meanwhile), then one JSON line of
what it saw; the Rust test asserts on it."""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from e2b import CommandExitException, NotFoundException, Sandbox as BaseSandbox, SandboxQuery, SandboxState
from e2b_desktop import Sandbox

WIDTH, HEIGHT = 800, 600


def wait_for(what, check, timeout=20.0):
    """Polls `check` until it returns something truthy; fails after `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"waited {timeout} s for {what}")


out = {}
desktop = Sandbox.create(resolution=(WIDTH, HEIGHT), timeout=120, metadata={"check": "sandboxd"})
out["sandbox_id"] = desktop.sandbox_id
out["screen_size"] = list(desktop.get_screen_size())

# Commands: exit codes, and output streamed as it is printed.
streamed = []
desktop.commands.run("for i in 1 2 3; do echo line $i; sleep 0.1; done", on_stdout=streamed.append)
out["streamed"] = [line.strip() for line in streamed]
try:
    desktop.commands.run("echo failing >&2; exit 3")
    out["exit_code"] = 0
except CommandExitException as error:
    out["exit_code"] = error.exit_code
    out["stderr"] = error.stderr

# Reattach: a background command connected to by pid; what it prints and
# how it ends after the connect reach the new reader.
waiting = desktop.commands.run(
    "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after connect; exit 4", background=True, timeout=0
)
reattached = desktop.commands.connect(waiting.pid)
desktop.files.write("/tmp/go", "")
try:
    reattached.wait()
    out["reattached"] = None
except CommandExitException as error:
    out["reattached"] = [error.exit_code, error.stdout]
try:
    desktop.commands.connect(999999)
    out["unknown_pid"] = "connected"
except NotFoundException:
    out["unknown_pid"] = "not_found"

# Files: up, down, listed, moved, removed.
desktop.files.write("notes/sdk.txt", "written by the sdk")
out["read"] = desktop.files.read("notes/sdk.txt")
out["listed"] = sorted(entry.name for entry in desktop.files.list("notes"))
desktop.files.rename("notes/sdk.txt", "notes/moved.txt")
out["moved_exists"] = desktop.files.exists("notes/moved.txt") and not desktop.files.exists("notes/sdk.txt")
desktop.files.remove("notes")
out["removed"] = not desktop.files.exists("notes")

# Signed URLs: the SDK signs one path with the sandbox's access token, so a
# plain HTTP client (urllib here, with the edge's routing headers and no
# token) reads or writes that path and no other.
def plain(url, body=None, swap=None):
    """Status and text of the signed URL's query sent to the edge; `swap`
    replaces one query value (a tampered URL)."""
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    if swap:
        query.update(swap)
    target = os.environ["E2B_SANDBOX_URL"] + "/files?" + urllib.parse.urlencode(query)
    headers = {"E2b-Sandbox-Id": desktop.sandbox_id, "E2b-Sandbox-Port": "49983"}
    if body is not None:
        headers["Content-Type"] = "application/octet-stream"
    request = urllib.request.Request(target, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request) as answer:
            return [answer.status, answer.read().decode()]
    except urllib.error.HTTPError as refused:
        return [refused.code, ""]


desktop.files.write("signed.txt", "read through a signed URL")
desktop.files.write("other.txt", "not for that URL")
download = desktop.download_url("signed.txt")
signature = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(download).query))["signature"]
out["signed"] = {
    "read": plain(download),
    "read_expiring": plain(desktop.download_url("signed.txt", use_signature_expiration=600)),
    "another_path": plain(download, swap={"path": "other.txt"}),
    "tampered": plain(download, swap={"signature": signature[:-1] + ("A" if signature[-1] != "A" else "B")}),
    "upload": plain(desktop.upload_url("uploaded.txt"), body=b"written through a signed URL")[0],
}
out["signed"]["uploaded"] = desktop.files.read("uploaded.txt")

# Screen: a screenshot of the asked size, the pointer, typing and keys land.
shot = bytes(desktop.screenshot())
out["screenshot_png"] = shot[:8] == b"\x89PNG\r\n\x1a\n"
out["screenshot_size"] = [int.from_bytes(shot[16:20], "big"), int.from_bytes(shot[20:24], "big")]
desktop.commands.run("xterm -geometry 60x10+0+0 -e 'cat > /tmp/typed.txt'", background=True, timeout=0)
wait_for("the terminal window", lambda: desktop.commands.run("xdotool search --class xterm || true").stdout.strip())
desktop.move_mouse(150, 60)
out["cursor"] = list(desktop.get_cursor_position())
desktop.left_click(150, 60)
desktop.double_click(150, 60)
desktop.write("typed by the sdk")
desktop.press("enter")
desktop.scroll("down", 2)
out["typed"] = wait_for(
    "the typed line", lambda: desktop.commands.run("cat /tmp/typed.txt 2>/dev/null || true").stdout.strip()
)

# The stream: started by the SDK, its URL for the Rust side to open.
desktop.stream.start()
out["stream_url"] = desktop.stream.get_url()
print("STREAM " + out["stream_url"], flush=True)
sys.stdin.readline()

# Timeout, then pause and connect with a process's memory intact.
desktop.set_timeout(600)
out["end_after_set_timeout_s"] = round((desktop.get_info().end_at.timestamp() - time.time()))
counter = desktop.commands.run(
    "n=0; while :; do n=$((n+1)); echo $n > /tmp/counter; sleep 0.05; done", background=True, timeout=0
)


def count(sandbox):
    """The counter's last value, 0 before its first."""
    return int(sandbox.commands.run("cat /tmp/counter 2>/dev/null || echo 0").stdout.strip() or 0)


wait_for("the counter to count", lambda: count(desktop) > 5)
at_pause = count(desktop)
desktop.pause()
out["state_paused"] = BaseSandbox.get_info(desktop.sandbox_id).state.value
listed = BaseSandbox.list(query=SandboxQuery(metadata={"check": "sandboxd"})).next_items()
out["listed_states"] = [(s.sandbox_id == desktop.sandbox_id, s.state.value) for s in listed]
time.sleep(2.0)  # what is measured: a paused sandbox runs nothing for two seconds (40 counts)
again = Sandbox.connect(desktop.sandbox_id)
before = count(again)
time.sleep(0.3)
after = count(again)
out["counter_at_pause_resume_later"] = [at_pause, before, after]
out["counter_pid_alive"] = any(p.pid == counter.pid for p in again.commands.list())
out["state_resumed"] = BaseSandbox.get_info(desktop.sandbox_id).state.value
running = BaseSandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
out["listed_running"] = [s.sandbox_id for s in running]

again.kill()
out["killed"] = not any(s.sandbox_id == desktop.sandbox_id for s in BaseSandbox.list().next_items())
print(json.dumps(out))
