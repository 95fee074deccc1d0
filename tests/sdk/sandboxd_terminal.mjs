// Drives flotilla-sandboxd's terminals and directory watching with the
// official E2B SDK for JavaScript, unmodified (npm `e2b`, pointed at the
// host with E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY): what
// sandboxd_terminal.py does, with `pty.create`, `sendInput`, `resize` and
// `kill`, and `files.watchDir` (streamed, recursive). Markers are computed
// by the shell, so an echoed line never passes for its output. Prints one
// JSON line of what it saw.

import { Sandbox, CommandExitError } from 'e2b'

const LIMIT_MS = 20000
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const encode = (text) => new TextEncoder().encode(text)

async function waitFor(what, check, timeoutMs = LIMIT_MS) {
  const end = Date.now() + timeoutMs
  while (Date.now() < end) {
    const found = await check()
    if (found) return found
    await sleep(50)
  }
  throw new Error(`waited ${timeoutMs} ms for ${what}`)
}

async function errorName(call) {
  try {
    await call()
  } catch (error) {
    return error.constructor.name
  }
  return null
}

async function terminal(sandbox, out) {
  const decoder = new TextDecoder()
  let received = ''
  const shell = await sandbox.pty.create({
    cols: 80,
    rows: 24,
    timeoutMs: 0,
    onData: (data) => {
      received += decoder.decode(data, { stream: true })
    },
  })
  const pid = shell.pid
  const seen = (pattern) => received.match(pattern)

  await sandbox.pty.sendInput(pid, encode('stty size; echo size-$((6*7))\n'))
  out.pty_size = (await waitFor('the first size', () => seen(/(\d+ \d+)\s+size-42/)))[1]

  await sandbox.pty.sendInput(
    pid,
    encode(`sh -c 'trap "stty size; echo winch-$((2+3)); exit" WINCH; echo armed-$((3+4)); while :; do sleep 0.05; done'\n`))
  await waitFor('the WINCH trap', () => seen(/armed-7/))
  await sandbox.pty.resize(pid, { cols: 120, rows: 40 })
  out.pty_size_after_resize = (await waitFor('SIGWINCH in the foreground program', () => seen(/(\d+ \d+)\s+winch-5/)))[1]

  await sandbox.pty.sendInput(pid, encode('echo typed-$((40+2))\n'))
  await waitFor("the typed command's output", () => seen(/typed-42/))
  out.typed_echoed = received.includes('echo typed-$((40+2))')

  out.resize_unknown_pid = await errorName(() => sandbox.pty.resize(999999, { cols: 10, rows: 10 }))
  out.pty_listed = (await sandbox.commands.list()).some((p) => p.pid === pid)
  out.pty_killed = await sandbox.pty.kill(pid)
  try {
    await shell.wait()
    out.pty_exit_code = 0
  } catch (error) {
    if (!(error instanceof CommandExitError)) throw error
    out.pty_exit_code = error.exitCode
  }
  out.pty_listed_after_kill = (await sandbox.commands.list()).some((p) => p.pid === pid)
}

async function watching(sandbox, out) {
  await sandbox.files.makeDir('watched')
  const events = []
  const handle = await sandbox.files.watchDir('watched', (event) => events.push([event.name, event.type]), {
    recursive: true,
    timeoutMs: 0,
  })
  const has = (name, type) => events.some(([n, t]) => n === name && t === type)
  await sandbox.files.write('watched/a.txt', 'one')
  await sandbox.commands.run('echo more >> watched/a.txt')
  await sandbox.files.remove('watched/a.txt')
  await sandbox.files.makeDir('watched/sub')
  // The recursive watch follows a new directory once it has seen it come.
  await waitFor('the new directory', () => has('sub', 'create'))
  await sandbox.files.write('watched/sub/b.txt', 'deep')
  await waitFor('the events', () => has('a.txt', 'remove') && has('sub/b.txt', 'write'))
  out.watched = events
  await handle.stop()
  out.watch_missing = await errorName(() => sandbox.files.watchDir('no-such-dir', () => {}))
  out.watch_a_file = await errorName(() => sandbox.files.watchDir('watched/sub/b.txt', () => {}))
}

const out = {}
const sandbox = await Sandbox.create('desktop', { timeoutMs: 120000 })
out.sandbox_id = sandbox.sandboxId
await terminal(sandbox, out)
await watching(sandbox, out)
await sandbox.kill()
console.log(JSON.stringify(out))
// Nothing of the SDK's keeps the process after the last line.
process.exit(0)
