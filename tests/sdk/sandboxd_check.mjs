// Drives flotilla-sandboxd with the official E2B SDKs for JavaScript,
// unmodified (npm `e2b` and `@e2b/desktop`, pointed at it with E2B_API_URL,
// E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY): what sandboxd_check.py does
// with the Python SDKs. Prints `STREAM <url>` once the stream runs and waits
// for a line on stdin, then one JSON line of what it saw.

import { createInterface } from 'node:readline'
import { Sandbox as BaseSandbox, CommandExitError, NotFoundError } from 'e2b'
import { Sandbox } from '@e2b/desktop'

const WIDTH = 800
const HEIGHT = 600
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const stdin = createInterface({ input: process.stdin })
// Lines are buffered from the start, so one sent early is not lost.
const lines = stdin[Symbol.asyncIterator]()
const nextLine = () => lines.next()

async function waitFor(what, check, timeoutMs = 20000) {
  const end = Date.now() + timeoutMs
  while (Date.now() < end) {
    const found = await check()
    if (found) return found
    await sleep(100)
  }
  throw new Error(`waited ${timeoutMs} ms for ${what}`)
}

const out = {}
const desktop = await Sandbox.create({ resolution: [WIDTH, HEIGHT], timeoutMs: 120000, metadata: { check: 'sandboxd-js' } })
out.sandbox_id = desktop.sandboxId
const size = await desktop.getScreenSize()
out.screen_size = [size.width, size.height]

const streamed = []
await desktop.commands.run('for i in 1 2 3; do echo line $i; sleep 0.1; done', { onStdout: (data) => streamed.push(data.trim()) })
out.streamed = streamed
try {
  await desktop.commands.run('echo failing >&2; exit 3')
  out.exit_code = 0
} catch (error) {
  if (!(error instanceof CommandExitError)) throw error
  out.exit_code = error.exitCode
  out.stderr = error.stderr
}

// Reattach: a background command connected to by pid; what it prints and
// how it ends after the connect reach the new reader.
const waiting = await desktop.commands.run(
  'while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after connect; exit 4', { background: true, timeoutMs: 0 })
const reattached = await desktop.commands.connect(waiting.pid)
await desktop.files.write('/tmp/go', '')
try {
  await reattached.wait()
  out.reattached = null
} catch (error) {
  if (!(error instanceof CommandExitError)) throw error
  out.reattached = [error.exitCode, error.stdout]
}
try {
  await desktop.commands.connect(999999)
  out.unknown_pid = 'connected'
} catch (error) {
  if (!(error instanceof NotFoundError)) throw error
  out.unknown_pid = 'not_found'
}

await desktop.files.write('notes/sdk.txt', 'written by the sdk')
out.read = await desktop.files.read('notes/sdk.txt')
out.listed = (await desktop.files.list('notes')).map((entry) => entry.name).sort()

const shot = Buffer.from(await desktop.screenshot())
out.screenshot_png = shot.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))
out.screenshot_size = [shot.readUInt32BE(16), shot.readUInt32BE(20)]
await desktop.commands.run("xterm -geometry 60x10+0+0 -e 'cat > /tmp/typed.txt'", { background: true, timeoutMs: 0 })
await waitFor('the terminal window', async () => (await desktop.commands.run('xdotool search --class xterm || true')).stdout.trim())
await desktop.moveMouse(150, 60)
const cursor = await desktop.getCursorPosition()
out.cursor = [cursor.x, cursor.y]
await desktop.leftClick(150, 60)
await desktop.doubleClick(150, 60)
await desktop.write('typed by the sdk')
await desktop.press('enter')
await desktop.scroll('down', 2)
out.typed = await waitFor('the typed line', async () => (await desktop.commands.run('cat /tmp/typed.txt 2>/dev/null || true')).stdout.trim())

await desktop.stream.start()
out.stream_url = desktop.stream.getUrl()
console.log('STREAM ' + out.stream_url)
await nextLine()

await desktop.setTimeout(600000)
out.end_after_set_timeout_s = Math.round(((await desktop.getInfo()).endAt.getTime() - Date.now()) / 1000)
const counter = await desktop.commands.run('n=0; while :; do n=$((n+1)); echo $n > /tmp/counter; sleep 0.05; done', {
  background: true,
  timeoutMs: 0,
})
const count = async (sandbox) =>
  parseInt((await sandbox.commands.run('cat /tmp/counter 2>/dev/null || echo 0')).stdout.trim() || '0', 10)
await waitFor('the counter to count', async () => (await count(desktop)) > 5)
const atPause = await count(desktop)
await desktop.pause()
out.state_paused = (await BaseSandbox.getInfo(desktop.sandboxId)).state
const listed = await BaseSandbox.list({ query: { metadata: { check: 'sandboxd-js' } } }).nextItems()
out.listed_states = listed.map((s) => [s.sandboxId === desktop.sandboxId, s.state])
await sleep(2000) // what is measured: a paused sandbox runs nothing for two seconds (40 counts)
const again = await Sandbox.connect(desktop.sandboxId)
const resumed = await count(again)
await sleep(300)
const later = await count(again)
out.counter_at_pause_resume_later = [atPause, resumed, later]
out.counter_pid_alive = (await again.commands.list()).some((p) => p.pid === counter.pid)
out.state_resumed = (await BaseSandbox.getInfo(desktop.sandboxId)).state
const running = await BaseSandbox.list({ query: { state: ['running'] } }).nextItems()
out.listed_running = running.map((s) => s.sandboxId)

await again.kill()
out.killed = !(await BaseSandbox.list().nextItems()).some((s) => s.sandboxId === desktop.sandboxId)
console.log(JSON.stringify(out))
stdin.close()
