// Flotilla dashboard: the batches panel. One row per batch of the tasks on
// the board, newest first: a bar whose segments are its tasks by status
// (GET /v1/batches/{id} counts them) and the counts in words. Clicking a
// row filters the task list to that batch. dashboard.js reads the batches
// and calls FlotillaBatches.render; every string reaches the page through
// textContent or an attribute, never as markup.
'use strict';

window.FlotillaBatches = (function () {
  /** The statuses in the order their segments are drawn. */
  const STATUSES = ['succeeded', 'failed', 'cancelled', 'waiting', 'running', 'queued'];

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  /** `5 succeeded · 1 waiting · 2 queued` (statuses with no task left out). */
  function countsText(counts) {
    const parts = STATUSES.filter((s) => Number(counts[s]) > 0).map((s) => `${Number(counts[s])} ${s}`);
    return parts.length ? parts.join(' · ') : 'no tasks';
  }

  /** The bar: one segment per status with tasks, as wide as its share. */
  function bar(batch) {
    const counts = batch.counts || {};
    const total = Math.max(Number(batch.total) || 0, STATUSES.reduce((n, s) => n + (Number(counts[s]) || 0), 0));
    const node = element('div', 'batch-bar');
    node.setAttribute('role', 'img');
    node.setAttribute('aria-label', countsText(counts));
    for (const status of STATUSES) {
      const count = Number(counts[status]) || 0;
      if (!count || !total) continue;
      const segment = element('span', `segment ${status}`);
      segment.dataset.status = status;
      segment.dataset.count = String(count);
      segment.title = `${count} ${status}`;
      segment.style.width = `${(100 * count) / total}%`;
      node.append(segment);
    }
    return node;
  }

  /** Draws `batches` (GET /v1/batches/{id} answers) into the table `table`; `pick(id)` filters the board to one. */
  function render(table, batches, pick) {
    const rows = batches.map((batch) => {
      const counts = batch.counts || {};
      const ended = (Number(counts.succeeded) || 0) + (Number(counts.failed) || 0) + (Number(counts.cancelled) || 0);
      const row = element('tr');
      row.dataset.batchId = String(batch.id);
      row.addEventListener('click', () => pick(String(batch.id)));
      const progress = element('td', 'batch-progress');
      progress.append(bar(batch));
      const words = element('div', 'batch-counts', countsText(counts));
      progress.append(words);
      row.append(element('td', 'id', batch.id), element('td', null, `${ended}/${Number(batch.total) || 0}`), progress);
      return row;
    });
    table.tBodies[0].replaceChildren(...rows);
    table.hidden = rows.length === 0;
    const none = document.getElementById('no-batches');
    if (none) none.hidden = rows.length > 0;
  }

  return { render, countsText };
})();
