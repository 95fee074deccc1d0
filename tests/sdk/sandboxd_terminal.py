"""Drives flotilla-sandboxd's terminals and directory watching with the
official E2B SDK for Python, unmodified (PyPI `e2b`, pointed at the host
with E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY): a PTY made
at a size, its size read back with `stty size`, resized (a program waiting
for SIGWINCH sees it), typed input echoed, input streamed in order, killed;
a directory watched with the sync SDK's `files.watch_dir` (polled, flat and
recursive) and the async SDK's (streamed) while files are created, written
and removed. Markers are computed by the shell (`$((6*7))`), so a line the
terminal echoes back never passes for the output it asks for. Prints one
JSON line of what it saw; the Rust test asserts on it."""

import asyncio
import json
import os
import re
import sys
import time

from e2b import (
    AsyncSandbox,
    CommandExitException,
    NotFoundException,
    PtySize,
    Sandbox,
)

LIMIT = 20.0


async def wait_for(what, check, timeout=LIMIT):
    """Polls `check` until it returns something truthy; fails after `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise TimeoutError(f"waited {timeout} s for {what}")


def error_name(call):
    """The name of the exception `call` raises, or None."""
    try:
        call()
    except Exception as error:  # the class is what is checked
        return type(error).__name__
    return None


async def terminal(sandbox, sync, out):
    """A PTY through its whole life."""
    received = bytearray()
    shell = await sandbox.pty.create(PtySize(rows=24, cols=80), on_data=received.extend, timeout=0)
    pid = shell.pid
    seen = lambda pattern: re.search(pattern, received.decode(errors="replace"))  # noqa: E731

    await sandbox.pty.send_stdin(pid, b"stty size; echo size-$((6*7))\n")
    first = await wait_for("the first size", lambda: seen(r"(\d+ \d+)\s+size-42"))
    out["pty_size"] = first.group(1)

    await sandbox.pty.send_stdin(
        pid, b"sh -c 'trap \"stty size; echo winch-$((2+3)); exit\" WINCH; echo armed-$((3+4)); while :; do sleep 0.05; done'\n"
    )
    await wait_for("the WINCH trap", lambda: seen(r"armed-7"))
    await sandbox.pty.resize(pid, PtySize(rows=40, cols=120))
    winched = await wait_for("SIGWINCH in the foreground program", lambda: seen(r"(\d+ \d+)\s+winch-5"))
    out["pty_size_after_resize"] = winched.group(1)

    await sandbox.pty.send_stdin(pid, b"echo typed-$((40+2))\n")
    await wait_for("the typed command's output", lambda: seen(r"typed-42"))
    text = received.decode(errors="replace")
    out["typed_echoed"] = "echo typed-$((40+2))" in text

    sync.pty.stream_input(pid, [b"echo streamed-", b"$((3*3))", b"-in-order\n"])
    await wait_for("the streamed command's output", lambda: seen(r"streamed-9-in-order"))
    out["streamed_input"] = True
    out["stream_input_unknown_pid"] = error_name(lambda: sync.pty.stream_input(999999, [b"x"]))

    try:
        await sandbox.pty.resize(999999, PtySize(rows=10, cols=10))
        out["resize_unknown_pid"] = None
    except NotFoundException:
        out["resize_unknown_pid"] = "not_found"

    out["pty_listed"] = any(p.pid == pid for p in await sandbox.commands.list())
    out["pty_killed"] = await sandbox.pty.kill(pid)
    try:
        await shell.wait()
        out["pty_exit_code"] = 0
    except CommandExitException as error:
        out["pty_exit_code"] = error.exit_code
    out["pty_listed_after_kill"] = any(p.pid == pid for p in await sandbox.commands.list())


async def polled_events(handle, until):
    """The sync watcher's events until `until(events)` holds."""
    events = []

    def fetch():
        events.extend((e.name, e.type.value) for e in handle.get_new_events())
        return until(events)

    await wait_for("the watcher's events", fetch)
    return events


async def watching(sandbox, sync, out):
    """Directories watched while files come and go."""
    sync.files.make_dir("watched")
    flat = sync.files.watch_dir("watched")
    deep = sync.files.watch_dir("watched", recursive=True)
    streamed = []
    streaming = await sandbox.files.watch_dir("watched", on_event=lambda e: streamed.append((e.name, e.type.value)))

    sync.files.write("watched/a.txt", "one")
    sync.commands.run("echo more >> watched/a.txt")
    sync.files.remove("watched/a.txt")
    sync.files.make_dir("watched/sub")

    removed = lambda events: ("a.txt", "remove") in events  # noqa: E731
    out["polled"] = await polled_events(flat, lambda events: removed(events) and ("sub", "create") in events)
    # The recursive watch follows a new directory once it has seen it come.
    deep_events = await polled_events(deep, lambda events: ("sub", "create") in events)
    sync.files.write("watched/sub/b.txt", "deep")
    deep_events += await polled_events(deep, lambda events: ("sub/b.txt", "write") in events)
    out["polled_recursive"] = deep_events
    await wait_for("the streamed events", lambda: removed(streamed) and ("sub", "create") in streamed)
    out["streamed"] = streamed
    await streaming.stop()
    flat.stop()
    deep.stop()
    out["watch_missing"] = error_name(lambda: sync.files.watch_dir("no-such-dir"))
    out["watch_a_file"] = error_name(lambda: sync.files.watch_dir("watched/sub/b.txt"))


async def main():
    out = {}
    sandbox = await AsyncSandbox.create("desktop", timeout=120)
    out["sandbox_id"] = sandbox.sandbox_id
    sync = Sandbox.connect(sandbox.sandbox_id)
    await terminal(sandbox, sync, out)
    await watching(sandbox, sync, out)
    await sandbox.kill()
    print(json.dumps(out), flush=True)


asyncio.run(main())
# Everything is checked and printed: leave without the interpreter's
# teardown, in which the SDK's clients (a sync and an async one, with
# their connection pools) aborted the process now and then on a loaded
# machine ("Fatal Python error: Aborted", no Python frame) after the
# result above was out.
sys.stdout.flush()
os._exit(0)
