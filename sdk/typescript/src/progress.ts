/** A batch's progress, counted from its event stream for `batches.wait`. */

import { isTerminal, type StreamEvent } from "./sse.js";

/** How far a batch is: `ended` of `total` tasks have ended, by outcome. */
export interface BatchProgress {
  total: number;
  ended: number;
  succeeded: number;
  failed: number;
  cancelled: number;
}

/** Counts each task of a batch once, at its terminal event. */
export class BatchTally {
  private readonly ended = new Set<string>();
  private readonly outcomes = new Map<string, number>();

  constructor(readonly total: number) {}

  /** Counts `event` when it ends a task not seen ending before; answers whether it did. */
  record(event: StreamEvent): boolean {
    const task = event.data.task_id;
    if (!isTerminal(event) || typeof task !== "string" || this.ended.has(task)) {
      return false;
    }
    this.ended.add(task);
    this.outcomes.set(event.type, (this.outcomes.get(event.type) ?? 0) + 1);
    return true;
  }

  progress(): BatchProgress {
    return {
      total: this.total,
      ended: this.ended.size,
      succeeded: this.outcomes.get("succeeded") ?? 0,
      failed: this.outcomes.get("failed") ?? 0,
      cancelled: this.outcomes.get("cancelled") ?? 0,
    };
  }
}

/** A batch's progress from its record (`GET /v1/batches/{id}`). */
export function progressOfView(view: {
  total: number;
  counts: { succeeded: number; failed: number; cancelled: number };
}): BatchProgress {
  const { succeeded, failed, cancelled } = view.counts;
  return { total: view.total, ended: succeeded + failed + cancelled, succeeded, failed, cancelled };
}

export function sameProgress(a: BatchProgress, b: BatchProgress): boolean {
  return a.total === b.total && a.ended === b.ended && a.succeeded === b.succeeded && a.failed === b.failed && a.cancelled === b.cancelled;
}
