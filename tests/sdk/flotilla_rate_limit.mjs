// The TypeScript SDK against a tenant's submit rate (one a second, burst
// one): a submit refused with 429 is sent again after `Retry-After` and then
// accepted; three clients allowed one retry each, refused together, share
// the one token their retries find, so the others throw `RateLimitError`
// once their retry is spent. Prints one JSON line of what each client saw.
import { Flotilla, RateLimitError } from "@flotilla/sdk";

const spec = { pipeline: "scripted", actions: [{ type: "wait", ms: 5 }] };

function recording(log) {
  return async (url, init) => {
    const response = await fetch(url, init);
    log.push([response.status, performance.now() / 1000, response.headers.get("retry-after")]);
    return response;
  };
}

async function patient() {
  const log = [];
  const client = new Flotilla({ maxRetries: 3, fetch: recording(log) });
  await client.tasks.submit({ prompt: "first", ...spec });
  const accepted = await client.tasks.submit({ prompt: "second", ...spec });
  return { responses: log, accepted: accepted.id };
}

async function impatient(index) {
  const log = [];
  const client = new Flotilla({ maxRetries: 1, fetch: recording(log) });
  try {
    const task = await client.tasks.submit({ prompt: `racing ${index}`, ...spec });
    return { accepted: task.id, responses: log };
  } catch (e) {
    if (!(e instanceof RateLimitError)) throw e;
    return { error: e.constructor.name, code: e.code, status: e.status, retry_after: e.retryAfter, responses: log };
  }
}

const first = await patient();
const racing = await Promise.all([0, 1, 2].map(impatient));
console.log(JSON.stringify({ patient: first, racing }));
