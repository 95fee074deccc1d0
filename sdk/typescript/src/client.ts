/**
 * `Flotilla`, the client: one resource per part of the API (`tasks`,
 * `batches`, `schedules`, `usage`, `webhooks`), each call answering the
 * types generated from the API's OpenAPI document.
 */

import { resolveSettings } from "./config.js";
import { WaitTimeoutError } from "./errors.js";
import { BatchTally, progressOfView, sameProgress, type BatchProgress } from "./progress.js";
import type { components } from "./schema.js";
import { isTerminal, type StreamEvent } from "./sse.js";
import { DEFAULT_TIMEOUT, Transport } from "./transport.js";

type Schemas = components["schemas"];
export type TaskAccepted = Schemas["TaskAccepted"];
export type TaskRecord = Schemas["TaskRecord"];
export type Cancelled = Schemas["Cancelled"];
export type InputAccepted = Schemas["InputAccepted"];
export type BatchAccepted = Schemas["BatchAccepted"];
export type BatchView = Schemas["BatchView"];
export type BatchCancelled = Schemas["BatchCancelled"];
export type Schedule = Schemas["Schedule"];
export type UsageReport = Schemas["UsageReport"];
export type Endpoint = Schemas["Endpoint"];
export type EndpointCreated = Schemas["EndpointCreated"];
export type SecretRotated = Schemas["SecretRotated"];
/** A task spec's fields, as a request carries them. */
export type TaskSpec = Record<string, unknown>;

export interface ClientOptions {
  /** Default: `FLOTILLA_API_URL`, else `http://127.0.0.1:8080`. */
  baseUrl?: string;
  /** Default: `FLOTILLA_API_KEY`. */
  apiKey?: string;
  /** How many times a call refused with 429 or 503 is sent again (default 3). */
  maxRetries?: number;
  /** The longest `Retry-After` the client waits, in seconds (default 60); a longer one surfaces the error. */
  maxRetryWait?: number;
  /** Seconds a plain call may take (default 30). */
  timeout?: number;
  /** The `fetch` to use (default the global one). */
  fetch?: typeof fetch;
}

const id = (value: string) => encodeURIComponent(value);

/** A client of the Flotilla API. */
export class Flotilla {
  readonly tasks: Tasks;
  readonly batches: Batches;
  readonly schedules: Schedules;
  readonly usage: Usage;
  readonly webhooks: Webhooks;
  readonly baseUrl: string;

  constructor(options: ClientOptions = {}) {
    const settings = resolveSettings(options.baseUrl, options.apiKey);
    this.baseUrl = settings.baseUrl;
    const transport = new Transport({
      baseUrl: settings.baseUrl,
      apiKey: settings.apiKey,
      retry: { maxRetries: options.maxRetries ?? 3, maxRetryWait: options.maxRetryWait ?? 60, backoff: 0.5 },
      timeout: options.timeout ?? DEFAULT_TIMEOUT,
      fetch: options.fetch ?? globalThis.fetch.bind(globalThis),
    });
    this.tasks = new Tasks(transport);
    this.batches = new Batches(transport, this.tasks);
    this.schedules = new Schedules(transport);
    this.usage = new Usage(transport);
    this.webhooks = new Webhooks(transport);
  }
}

export class Tasks {
  constructor(private readonly http: Transport) {}

  /** Submits one task (any field of a task spec). */
  submit(spec: TaskSpec): Promise<TaskAccepted> {
    return this.http.json("POST", "/v1/tasks", { body: spec });
  }

  get(taskId: string): Promise<TaskRecord> {
    return this.http.json("GET", `/v1/tasks/${id(taskId)}`);
  }

  /** Every task matching the filters, newest first, page after page. */
  list(filters: { status?: string; batch?: string; pageSize?: number } = {}): AsyncGenerator<TaskRecord> {
    return this.http.pages("/v1/tasks", "tasks", { status: filters.status, batch: filters.batch, limit: filters.pageSize });
  }

  cancel(taskId: string): Promise<Cancelled> {
    return this.http.json("POST", `/v1/tasks/${id(taskId)}/cancel`);
  }

  approve(taskId: string, message?: string): Promise<InputAccepted> {
    return this.http.json("POST", `/v1/tasks/${id(taskId)}/input`, { body: { decision: "approve", message } });
  }

  deny(taskId: string, message?: string): Promise<InputAccepted> {
    return this.http.json("POST", `/v1/tasks/${id(taskId)}/input`, { body: { decision: "deny", message } });
  }

  /** The task's events, stored history first, until its terminal event; a dropped connection resumes after the last event received. */
  events(taskId: string, options: { after?: number } = {}): AsyncGenerator<StreamEvent> {
    const after = options.after === undefined ? undefined : String(options.after);
    return this.http.follow(`/v1/tasks/${id(taskId)}/events`, after, true, async () => false);
  }

  /** Follows the task until it ends and answers its final record. */
  async wait(taskId: string, options: { timeout?: number; onEvent?: (event: StreamEvent) => void } = {}): Promise<TaskRecord> {
    const deadline = options.timeout === undefined ? undefined : Date.now() + options.timeout * 1000;
    for await (const event of this.events(taskId)) {
      options.onEvent?.(event);
      if (deadline !== undefined && Date.now() > deadline && !isTerminal(event)) {
        throw new WaitTimeoutError(`task ${taskId} did not end within ${options.timeout} s`);
      }
    }
    return this.get(taskId);
  }
}

export class Batches {
  constructor(
    private readonly http: Transport,
    private readonly taskList: Tasks,
  ) {}

  /** Submits many tasks at once; each spec is laid over `defaults`. */
  submit(tasks: TaskSpec[], defaults?: TaskSpec): Promise<BatchAccepted> {
    return this.http.json("POST", "/v1/batches", { body: defaults ? { tasks, defaults } : { tasks } });
  }

  get(batchId: string): Promise<BatchView> {
    return this.http.json("GET", `/v1/batches/${id(batchId)}`);
  }

  cancel(batchId: string): Promise<BatchCancelled> {
    return this.http.json("POST", `/v1/batches/${id(batchId)}/cancel`);
  }

  tasks(batchId: string, options: { pageSize?: number } = {}): AsyncGenerator<TaskRecord> {
    return this.taskList.list({ batch: batchId, pageSize: options.pageSize });
  }

  /** Every event of the batch's tasks until all of them have ended. */
  events(batchId: string, options: { after?: string } = {}): AsyncGenerator<StreamEvent> {
    const finished = async () => (await this.get(batchId)).finished_at != null;
    return this.http.follow(`/v1/batches/${id(batchId)}/events`, options.after, false, finished);
  }

  /** Follows the batch until every task has ended, calling `onProgress` each time one ends; answers the batch's final record. */
  async wait(batchId: string, options: { onProgress?: (progress: BatchProgress) => void; timeout?: number } = {}): Promise<BatchView> {
    const deadline = options.timeout === undefined ? undefined : Date.now() + options.timeout * 1000;
    const tally = new BatchTally((await this.get(batchId)).total);
    for await (const event of this.events(batchId)) {
      if (tally.record(event)) {
        options.onProgress?.(tally.progress());
      }
      if (deadline !== undefined && Date.now() > deadline) {
        throw new WaitTimeoutError(`batch ${batchId} did not end within ${options.timeout} s`);
      }
    }
    const view = await this.get(batchId);
    const final = progressOfView(view);
    if (options.onProgress && !sameProgress(final, tally.progress())) {
      options.onProgress(final);
    }
    return view;
  }
}

export class Schedules {
  constructor(private readonly http: Transport) {}

  /** Creates a schedule: `cron` (five fields), the `task` each run enqueues, and optionally `timezone`, `overlap`, `paused`. */
  create(schedule: { cron: string; task: TaskSpec; timezone?: string; overlap?: string; paused?: boolean }): Promise<Schedule> {
    return this.http.json("POST", "/v1/schedules", { body: schedule });
  }

  list(options: { pageSize?: number } = {}): AsyncGenerator<Schedule> {
    return this.http.pages("/v1/schedules", "schedules", { limit: options.pageSize });
  }

  get(scheduleId: string): Promise<Schedule> {
    return this.http.json("GET", `/v1/schedules/${id(scheduleId)}`);
  }

  update(scheduleId: string, patch: { cron?: string; timezone?: string; overlap?: string; paused?: boolean }): Promise<Schedule> {
    return this.http.json("PATCH", `/v1/schedules/${id(scheduleId)}`, { body: patch });
  }

  pause(scheduleId: string): Promise<Schedule> {
    return this.update(scheduleId, { paused: true });
  }

  resume(scheduleId: string): Promise<Schedule> {
    return this.update(scheduleId, { paused: false });
  }

  async delete(scheduleId: string): Promise<void> {
    await this.http.send("DELETE", `/v1/schedules/${id(scheduleId)}`);
  }
}

export class Usage {
  constructor(private readonly http: Transport) {}

  /** What the tenant used per day from `from` to `to` (days like `2026-01-31`; the last 30 days by default), and its limits. */
  get(range: { from?: string; to?: string } = {}): Promise<UsageReport> {
    return this.http.json("GET", "/v1/usage", { query: { from: range.from, to: range.to } });
  }
}

export class Webhooks {
  constructor(private readonly http: Transport) {}

  /** Registers an endpoint; the answer carries its signing `secret`. */
  create(endpoint: { url: string; events: string[]; batch_id?: string }): Promise<EndpointCreated> {
    return this.http.json("POST", "/v1/webhooks", { body: endpoint });
  }

  list(options: { pageSize?: number } = {}): AsyncGenerator<Endpoint> {
    return this.http.pages("/v1/webhooks", "webhooks", { limit: options.pageSize });
  }

  get(webhookId: string): Promise<Endpoint> {
    return this.http.json("GET", `/v1/webhooks/${id(webhookId)}`);
  }

  update(webhookId: string, patch: Record<string, unknown>): Promise<Endpoint> {
    return this.http.json("PATCH", `/v1/webhooks/${id(webhookId)}`, { body: patch });
  }

  async delete(webhookId: string): Promise<void> {
    await this.http.send("DELETE", `/v1/webhooks/${id(webhookId)}`);
  }

  rotateSecret(webhookId: string): Promise<SecretRotated> {
    return this.http.json("POST", `/v1/webhooks/${id(webhookId)}/rotate-secret`);
  }
}
