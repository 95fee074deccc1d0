// Retries, typed errors, pagination, event streams and webhook
// verification of the built package (dist/), against a fetch that answers
// as the API does.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Webhook } from "standardwebhooks";

import { ConfigurationError, Flotilla, InvalidSignatureError, NotFoundError, RateLimitError, verifyWebhook } from "../dist/index.js";

const KEY = "flt_unit0000000000000000000000000000000000";

function json(status, body, headers = {}) {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
}

function rateLimited(seconds = "0") {
  return json(429, { error: { code: "rate_limited", message: "submit rate exceeded" } }, { "retry-after": seconds });
}

function client(handler, options = {}) {
  return new Flotilla({ baseUrl: "http://api.test", apiKey: KEY, fetch: async (url, init) => handler(new URL(url), init), ...options });
}

test("a 429 is retried after Retry-After, then succeeds", async () => {
  const seen = [];
  const c = client(() => {
    seen.push(Date.now());
    return seen.length === 1 ? rateLimited("1") : json(200, { id: "tsk_1", status: "succeeded" });
  });
  assert.equal((await c.tasks.get("tsk_1")).id, "tsk_1");
  assert.equal(seen.length, 2);
  assert.ok(seen[1] - seen[0] >= 950, "the retry waited for Retry-After");
});

test("retries spent throw the typed error with the API's code", async () => {
  let calls = 0;
  const c = client(() => {
    calls += 1;
    return rateLimited("0");
  }, { maxRetries: 2 });
  await assert.rejects(c.usage.get(), (e) => e instanceof RateLimitError && e.code === "rate_limited" && e.status === 429 && e.retryAfter === 0);
  assert.equal(calls, 3);
});

test("a Retry-After past the cap surfaces at once", async () => {
  let calls = 0;
  const c = client(() => {
    calls += 1;
    return rateLimited("120");
  }, { maxRetryWait: 5 });
  await assert.rejects(c.usage.get(), RateLimitError);
  assert.equal(calls, 1);
});

test("a 404 is not retried and names its code", async () => {
  let calls = 0;
  const c = client(() => {
    calls += 1;
    return json(404, { error: { code: "not_found", message: "no such task" } });
  });
  await assert.rejects(c.tasks.get("tsk_x"), (e) => e instanceof NotFoundError && e.code === "not_found" && e.message === "not_found: no such task");
  assert.equal(calls, 1);
});

test("pages are followed by next_cursor", async () => {
  const c = client((url) => {
    const cursor = url.searchParams.get("cursor");
    if (!cursor) return json(200, { tasks: [{ id: "tsk_1" }, { id: "tsk_2" }], next_cursor: "tsk_2" });
    assert.equal(cursor, "tsk_2");
    return json(200, { tasks: [{ id: "tsk_3" }], next_cursor: null });
  });
  const ids = [];
  for await (const t of c.tasks.list({ pageSize: 2 })) ids.push(t.id);
  assert.deepEqual(ids, ["tsk_1", "tsk_2", "tsk_3"]);
});

function frame(seq, type) {
  return `id: ${seq}\r\nevent: ${type}\r\ndata: ${JSON.stringify({ seq, task_id: "tsk_1", type })}\r\n\r\n`;
}

test("a closed stream resumes after the last event id", async () => {
  const resumedFrom = [];
  const c = client((url, init) => {
    const last = init.headers["Last-Event-ID"];
    resumedFrom.push(last);
    const body = last === undefined ? ": keep-alive\n\n" + frame(1, "queued") + frame(2, "started") : frame(3, "succeeded");
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
  });
  const seen = [];
  for await (const e of c.tasks.events("tsk_1")) seen.push([e.data.seq, e.type]);
  assert.deepEqual(seen, [[1, "queued"], [2, "started"], [3, "succeeded"]]);
  assert.deepEqual(resumedFrom, [undefined, "2"]);
});

test("a refused reconnection is tried again from the same position", async () => {
  const resumedFrom = [];
  const c = client((url, init) => {
    const last = init.headers["Last-Event-ID"];
    resumedFrom.push(last);
    if (resumedFrom.length === 2) throw new TypeError("fetch failed");
    const body = last === undefined ? frame(1, "queued") : frame(2, "succeeded");
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
  });
  const seen = [];
  for await (const e of c.tasks.events("tsk_1")) seen.push(e.type);
  assert.deepEqual(seen, ["queued", "succeeded"]);
  assert.deepEqual(resumedFrom, [undefined, "1", "1"]);
});

test("settings come from the environment as the CLI reads them", () => {
  const saved = { ...process.env };
  try {
    process.env.FLOTILLA_API_URL = "http://fleet.test:9000/";
    process.env.FLOTILLA_API_KEY = KEY;
    assert.equal(new Flotilla().baseUrl, "http://fleet.test:9000");
    process.env.FLOTILLA_API_KEY = " ";
    assert.throws(() => new Flotilla(), ConfigurationError);
  } finally {
    process.env = saved;
  }
});

test("a signed delivery verifies; a forged or stale one is rejected", () => {
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const body = JSON.stringify({ type: "task.succeeded", timestamp: "t", data: { id: "tsk_1" } });
  const sign = (at, key = secret) => ({
    "webhook-id": "msg_1",
    "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
    "webhook-signature": new Webhook(key).sign("msg_1", at, body),
  });
  const now = new Date();
  assert.equal(verifyWebhook(secret, body, new Headers(sign(now))).data.id, "tsk_1");
  assert.throws(() => verifyWebhook(secret, body.replace("tsk_1", "tsk_2"), sign(now)), InvalidSignatureError);
  assert.throws(() => verifyWebhook(secret, body, sign(now, "whsec_" + "A".repeat(32))), InvalidSignatureError);
  assert.throws(() => verifyWebhook(secret, body, sign(new Date(Date.now() - 6 * 60 * 1000))), InvalidSignatureError);
});
