// Compares two runs of an evaluation suite: the reports of two batches
// (GET /v1/batches/{id}/report), per model and pipeline (pass rates and
// their change) and per task (what newly fails, what newly passes).
// Text from the API is only ever set as textContent.
(function () {
  'use strict';

  const KEY_STORAGE = 'flotilla.key';
  const $ = (id) => document.getElementById(id);

  function cellKey(cell) {
    return `${cell.model || '-'}\u0000${cell.pipeline || '-'}`;
  }

  async function report(key, batch) {
    const response = await fetch(`/v1/batches/${encodeURIComponent(batch)}/report`, {
      headers: { Authorization: `Bearer ${key}` },
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const message = (body.error && body.error.message) || response.statusText;
      throw new Error(`${batch}: ${message}`);
    }
    return body;
  }

  function td(text, className) {
    const cell = document.createElement('td');
    cell.textContent = text;
    if (className) cell.className = className;
    return cell;
  }

  function percent(value) {
    return value === undefined || value === null ? '-' : `${(value * 100).toFixed(1)}%`;
  }

  // The change of one suite task in one cell between two runs.
  function change(before, after) {
    const passedBefore = before === 'passed';
    const passedAfter = after === 'passed';
    if (passedBefore && !passedAfter) return 'newly-fails';
    if (!passedBefore && passedAfter) return 'newly-passes';
    return 'same';
  }

  function showCells(base, head) {
    const body = $('cells').tBodies[0];
    body.replaceChildren();
    const before = new Map(base.cells.map((c) => [cellKey(c), c]));
    for (const cell of head.cells) {
      const old = before.get(cellKey(cell));
      const row = document.createElement('tr');
      row.dataset.model = cell.model || '';
      const delta = old ? cell.pass_rate - old.pass_rate : null;
      const deltaText = delta === null ? 'new' : `${delta >= 0 ? '+' : ''}${(delta * 100).toFixed(1)} pts`;
      const deltaClass = delta === null || delta === 0 ? '' : delta > 0 ? 'delta-up' : 'delta-down';
      const passAtK = Object.entries(cell.pass_at_k || {}).map(([k, v]) => `@${k} ${percent(v)}`).join(' ');
      row.append(
        td(cell.model || '-'),
        td(cell.pipeline || '-'),
        td(old ? `${percent(old.pass_rate)} (${old.passed}/${old.groups})` : '-'),
        td(`${percent(cell.pass_rate)} (${cell.passed}/${cell.groups})`),
        td(deltaText, deltaClass),
        td(cell.mean_score.toFixed(2)),
        td(passAtK),
      );
      body.append(row);
    }
  }

  function showTasks(base, head) {
    const body = $('tasks').tBodies[0];
    body.replaceChildren();
    const before = new Map();
    for (const task of base.tasks) {
      for (const cell of task.cells) before.set(`${task.name}\u0000${cellKey(cell)}`, cell.verdict);
    }
    let fails = 0;
    let passes = 0;
    const rows = [];
    for (const task of head.tasks) {
      for (const cell of task.cells) {
        const old = before.get(`${task.name}\u0000${cellKey(cell)}`);
        const kind = change(old, cell.verdict);
        if (kind === 'newly-fails') fails += 1;
        if (kind === 'newly-passes') passes += 1;
        const row = document.createElement('tr');
        row.dataset.change = kind;
        row.dataset.task = task.name;
        row.dataset.model = cell.model || '';
        row.append(
          td(task.name),
          td(cell.model || '-'),
          td(cell.pipeline || '-'),
          td(old || '-', `verdict-${old || 'none'}`),
          td(cell.verdict || '-', `verdict-${cell.verdict || 'none'}`),
        );
        rows.push([kind === 'newly-fails' ? 0 : kind === 'newly-passes' ? 1 : 2, row]);
      }
    }
    rows.sort((a, b) => a[0] - b[0]);
    body.append(...rows.map(([, row]) => row));
    $('summary').textContent = `${fails} newly fail, ${passes} newly pass`;
  }

  async function compare(event) {
    if (event) event.preventDefault();
    const key = $('key-input').value.trim() || sessionStorage.getItem(KEY_STORAGE) || '';
    $('compare-error').textContent = '';
    try {
      const [base, head] = await Promise.all([report(key, $('base-batch').value.trim()), report(key, $('head-batch').value.trim())]);
      sessionStorage.setItem(KEY_STORAGE, key);
      showCells(base, head);
      showTasks(base, head);
      $('result').hidden = false;
      document.body.dataset.compared = `${base.batch_id}..${head.batch_id}`;
    } catch (error) {
      $('compare-error').textContent = error.message;
    }
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('compare-form').addEventListener('submit', compare);
    const params = new URLSearchParams(location.hash.slice(1));
    if (params.get('before')) $('base-batch').value = params.get('before');
    if (params.get('after')) $('head-batch').value = params.get('after');
  });
})();
