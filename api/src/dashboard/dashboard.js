// Flotilla dashboard: queues, recent tasks, webhooks with their deliveries
// and one task's live events, read from the /v1 API with the key typed into
// the page. The board follows the tenant's feed (GET /v1/events, resumed
// with Last-Event-ID after a drop) and reads the lists again when events
// come, instead of polling.
//
// Every string from the API reaches the page through textContent or an
// attribute, never as markup. The event stream is read with fetch() because
// EventSource cannot send the Authorization header.
'use strict';

(function () {
  const KEY_STORAGE = 'flotilla.key';
  /** How long the board waits after an event before reading the lists again (one read per burst). */
  const BOARD_REFRESH_MS = 250;
  /** How long after an event the webhooks' deliveries are read again (delivery follows the event). */
  const HOOKS_REFRESH_MS = 1000;
  /** How often deliveries are read again while one shown is pending. */
  const PENDING_REFRESH_MS = 2000;
  const DELIVERIES_SHOWN = 20;
  const WEBHOOK_ID = /^whk_[0-9A-Za-z]+$/;
  const RECONNECT_MIN_MS = 1000;
  const RECONNECT_MAX_MS = 15000;
  const DETAIL_REFRESH_MS = 300;
  const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);
  const TASK_ID = /^tsk_[0-9A-Za-z]{26}$/;

  const $ = (id) => document.getElementById(id);

  /** What the page knows: the key, the tenant feed, the open task and webhook. */
  const state = {
    key: null, feed: null, boardTimer: null, selected: null, tasks: [], usageChart: null,
    hookId: null, hooksTimer: null, hooksRead: 0,
  };

  // ---- small helpers ------------------------------------------------------

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function cell(text, className) {
    return element('td', className, text === undefined || text === null ? '' : text);
  }

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  function localTime(value) {
    if (!value) return '';
    const date = new Date(value);
    return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
  }

  /** The time alone for today, the date and time otherwise. */
  function shortTime(value) {
    if (!value) return '';
    const date = new Date(value);
    if (Number.isNaN(date.getTime())) return String(value);
    const today = date.toDateString() === new Date().toDateString();
    return today ? date.toLocaleTimeString() : date.toLocaleString();
  }

  function clockTime(value) {
    const date = new Date(value);
    if (Number.isNaN(date.getTime())) return '';
    const pad = (n, width) => String(n).padStart(width, '0');
    return `${pad(date.getHours(), 2)}:${pad(date.getMinutes(), 2)}:${pad(date.getSeconds(), 2)}.${pad(date.getMilliseconds(), 3)}`;
  }

  function duration(ms) {
    const n = Number(ms);
    if (!Number.isFinite(n) || n <= 0) return '–';
    if (n < 1000) return `${Math.round(n)} ms`;
    if (n < 60000) return `${(n / 1000).toFixed(1)} s`;
    if (n < 3600000) return `${Math.floor(n / 60000)} min`;
    return `${(n / 3600000).toFixed(1)} h`;
  }

  /** An http(s) URL, or null: nothing else may become an image source. */
  function safeUrl(value) {
    try {
      const url = new URL(String(value), window.location.href);
      return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
    } catch (_) {
      return null;
    }
  }

  function taskPath(id, suffix) {
    return `/v1/tasks/${encodeURIComponent(id)}${suffix || ''}`;
  }

  // ---- the API ------------------------------------------------------------

  class HttpError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function errorOf(response) {
    let detail = {};
    try {
      const body = await response.json();
      if (body && body.error) detail = body.error;
    } catch (_) {
      // not JSON: keep the status line
    }
    return new HttpError(response.status, detail.code || `http_${response.status}`, detail.message || response.statusText);
  }

  function authHeaders(extra) {
    return Object.assign({ Authorization: `Bearer ${state.key}` }, extra || {});
  }

  async function api(method, path, body) {
    const init = { method, headers: authHeaders(), cache: 'no-store' };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    if (!response.ok) throw await errorOf(response);
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  /** Signs out on 401; returns a line to show for anything else. */
  function explain(error) {
    if (error && error.status === 401) {
      signOut('The key was refused.');
      return '';
    }
    if (error && error.status) return `${error.status} ${error.code}: ${error.message}`;
    return `network error: ${error && error.message ? error.message : error}`;
  }

  // ---- signing in and out -------------------------------------------------

  async function signIn(key) {
    state.key = key;
    $('key-error').textContent = '';
    let queues;
    try {
      queues = await api('GET', '/v1/queues');
    } catch (error) {
      state.key = null;
      $('key-error').textContent = error.status === 401 ? 'This key is not known.' : explain(error);
      return;
    }
    sessionStorage.setItem(KEY_STORAGE, key);
    $('login').hidden = true;
    $('board').hidden = false;
    $('sign-out').hidden = false;
    renderQueues(queues);
    followFeed();
    refreshHooks();
    refreshUsage();
    const wanted = window.location.hash.slice(1);
    if (TASK_ID.test(wanted)) openTask(wanted);
  }

  function signOut(message) {
    sessionStorage.removeItem(KEY_STORAGE);
    state.key = null;
    if (state.feed) state.feed.abort();
    state.feed = null;
    clearTimeout(state.boardTimer);
    clearTimeout(state.hooksTimer);
    state.hookId = null;
    closeTask();
    $('board').hidden = true;
    $('sign-out').hidden = true;
    $('live').hidden = true;
    $('login').hidden = false;
    $('key-input').value = '';
    $('key-error').textContent = message || '';
    $('key-input').focus();
  }

  // ---- queues and the task list, following the tenant feed ----------------

  /** Reads the queues and the task list. */
  async function refreshBoard() {
    clearTimeout(state.boardTimer);
    if (!state.key) return;
    try {
      const [queues, page] = await Promise.all([api('GET', '/v1/queues'), api('GET', tasksQuery())]);
      renderQueues(queues);
      renderTasks((page && page.tasks) || []);
      await refreshBatches(state.tasks);
    } catch (error) {
      if (state.key) $('notice').textContent = explain(error);
    }
  }

  const BATCH_ID = /^bat_[0-7][0-9a-hjkmnp-tv-z]{25}$/;
  /** The most batches the batches panel shows. */
  const BATCHES_SHOWN = 5;

  /** Reads the counts of the newest batches among `tasks` and draws their bars (batches.js). */
  async function refreshBatches(tasks) {
    const ids = [...new Set(tasks.map((t) => t.batch_id).filter((id) => BATCH_ID.test(String(id || ''))))]
      .sort().reverse().slice(0, BATCHES_SHOWN);
    const batches = (await Promise.all(ids.map((id) => api('GET', `/v1/batches/${id}`).catch(() => null)))).filter(Boolean);
    window.FlotillaBatches.render($('batches'), batches, (id) => {
      $('task-batch').value = id;
      refreshBoard();
    });
  }

  /** The task list's read: the newest 50, of the status and batch picked. */
  function tasksQuery() {
    const params = new URLSearchParams({ limit: '50' });
    const status = $('task-status').value;
    const batch = $('task-batch').value.trim();
    if (status) params.set('status', status);
    if (BATCH_ID.test(batch)) params.set('batch', batch);
    return `/v1/tasks?${params}`;
  }

  /** Shows only the rows whose id, prompt, batch or pipeline hold the search's words. */
  function applySearch() {
    const words = $('task-search').value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const row of $('tasks').tBodies[0].rows) {
      const text = row.dataset.search || '';
      row.hidden = !words.every((w) => text.includes(w));
      if (!row.hidden) shown += 1;
    }
    const total = $('tasks').tBodies[0].rows.length;
    $('task-count').textContent = total === 0 ? '' : (shown === total ? `${total} shown` : `${shown} of ${total} shown`);
  }

  /** Reads the board again soon, once for a burst of events. */
  function boardSoon() {
    clearTimeout(state.boardTimer);
    state.boardTimer = setTimeout(refreshBoard, BOARD_REFRESH_MS);
  }

  /** Follows every event of the tenant (GET /v1/events), reconnecting after drops. */
  async function followFeed() {
    if (state.feed) state.feed.abort();
    const controller = new AbortController();
    state.feed = controller;
    const feed = { lastEventId: '' };
    let retry = RECONNECT_MIN_MS;
    let delay = retry;
    while (state.key && state.feed === controller && !controller.signal.aborted) {
      try {
        const headers = authHeaders({ Accept: 'text/event-stream' });
        if (feed.lastEventId) headers['Last-Event-ID'] = feed.lastEventId;
        const response = await fetch('/v1/events', { headers, signal: controller.signal, cache: 'no-store' });
        if (!response.ok) throw await errorOf(response);
        delay = retry;
        // The feed starts after the position it was opened at (its tip, the
        // first time): the board is read again now, so a change made between
        // the last read and this opening shows too.
        await refreshBoard();
        setLive(true, '');
        const parser = new SseParser((frame) => onFeedFrame(feed, frame), (ms) => { retry = Math.max(ms, 100); });
        await pump(response, parser);
      } catch (error) {
        if (controller.signal.aborted || state.feed !== controller) return;
        if (error && error.status === 401) return;
        setLive(false, explain(error));
      }
      if (controller.signal.aborted || state.feed !== controller) return;
      setLive(false, 'reconnecting to the event feed');
      await sleep(delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
  }

  // The event a frame carries, or null when its data is not a JSON object.
  function frameEvent(frame) {
    try {
      const event = JSON.parse(frame.data);
      return event && typeof event === 'object' ? event : null;
    } catch (_) {
      return null;
    }
  }

  function onFeedFrame(feed, frame) {
    if (frame.id) feed.lastEventId = frame.id;
    const event = frameEvent(frame);
    if (!event) return;
    const row = Array.from($('tasks').tBodies[0].rows).find((r) => r.dataset.taskId === String(event.task_id));
    if (row && STATUS_OF_EVENT[event.type]) {
      row.dataset.status = STATUS_OF_EVENT[event.type];
      row.cells[1].replaceChildren(statusBadge(STATUS_OF_EVENT[event.type]));
    }
    boardSoon();
    if (TERMINAL.has(event.type) || event.type === 'waiting') hooksSoon(HOOKS_REFRESH_MS);
  }

  /** The status a task has after an event of each type that changes it. */
  const STATUS_OF_EVENT = {
    queued: 'queued', started: 'running', waiting: 'waiting', released: 'running',
    succeeded: 'succeeded', failed: 'failed', cancelled: 'cancelled',
  };

  function setLive(ok, message) {
    const live = $('live');
    live.hidden = false;
    live.classList.toggle('stale', !ok);
    live.textContent = ok ? 'live' : 'stale';
    $('notice').textContent = message;
  }

  /** An array, or an empty one for anything else (a field the answer lacks). */
  const listOf = (value) => (Array.isArray(value) ? value : []);

  /**
   * Fills a table's body with a row per item, marked with the item's `key`
   * (`data-<key>`, what the tests find rows by) and holding `cells(item)`.
   */
  function fillRows(table, items, key, cells) {
    $(table).tBodies[0].replaceChildren(...items.map((item) => {
      const row = element('tr');
      row.dataset[key] = String(item[key]);
      row.append(...cells(item));
      return row;
    }));
  }

  function renderQueues(stats) {
    fillRows('queues', listOf(stats && stats.lanes), 'lane', (lane) => [
      cell(lane.lane), cell(lane.depth, 'num'), cell(lane.pending, 'num'), cell(lane.delayed, 'num'),
      cell(duration(lane.oldest_age_ms), 'num'), cell(lane.consumers, 'num'),
    ]);
    fillRows('tenants', listOf(stats && stats.tenants), 'tenant', (t) => [
      cell(t.tenant), cell(t.queued, 'num'), cell(t.running, 'num'), cell(t.delayed, 'num'), cell(t.weight, 'num'),
      cell(t.max_running == null ? '-' : t.max_running, 'num'),
    ]);
    const waits = listOf(stats && stats.waiting_for);
    $('waiting').textContent = waits.length === 0 ? ''
      : `waiting for ${waits.map((w) => `${w.capability} (${w.queued})`).join(', ')}`;
    $('dead').textContent = `dead letters: ${stats && Number.isFinite(stats.dead) ? stats.dead : 0}`;
  }

  function statusBadge(status) {
    return element('span', `status ${String(status).replace(/[^a-z]/g, '')}`, status);
  }

  function renderTasks(tasks) {
    state.tasks = tasks;
    const selectedId = state.selected && state.selected.id;
    const rows = tasks.map((task) => {
      const row = element('tr');
      row.dataset.taskId = String(task.id);
      row.dataset.status = String(task.status);
      if (task.id === selectedId) row.classList.add('selected');
      const status = cell('', 'status-cell');
      status.append(statusBadge(task.status));
      const spec = task.spec || {};
      const prompt = String(spec.prompt || '');
      const batch = task.batch_id ? String(task.batch_id) : '';
      const promptCell = cell(prompt.length > 80 ? `${prompt.slice(0, 79)}…` : prompt, 'prompt-cell');
      promptCell.title = prompt;
      row.dataset.search = [task.id, prompt, batch, spec.pipeline || '', task.status].join(' ').toLowerCase();
      row.append(
        cell(task.id, 'id'),
        status,
        promptCell,
        cell(batch, 'id'),
        cell(task.code || ''),
        cell(spec.pipeline || ''),
        cell(task.steps_taken, 'num'),
        cell(shortTime(task.created_at)),
      );
      return row;
    });
    $('tasks').tBodies[0].replaceChildren(...rows);
    $('no-tasks').hidden = tasks.length > 0;
    applySearch();
    renderWall(tasks);
  }

  // ---- the wall: the running tasks' live desktops ---------------------------

  /** The most desktops the wall shows at once. */
  const WALL_MAX = 8;

  /** Whether a task holds a desktop that can be shown now. */
  function showsDesktop(task) {
    const stream = task.sandbox && task.sandbox.stream_url;
    return typeof stream === 'string' && stream !== '' && (task.status === 'running' || task.status === 'waiting');
  }

  /**
   * A view-only tile per running task with a desktop (the newest first, at
   * most WALL_MAX): a tile already shown keeps its view open; a click on its
   * caption opens the task. Tiles of tasks that ended go.
   */
  function renderWall(tasks) {
    const wall = $('wall');
    const shown = tasks.filter(showsDesktop).slice(0, WALL_MAX);
    const keep = new Set(shown.map((t) => String(t.id)));
    for (const tile of Array.from(wall.children)) {
      if (!keep.has(tile.dataset.taskId)) tile.remove();
    }
    for (const task of shown) {
      const id = String(task.id);
      if (wall.querySelector(`[data-task-id="${id}"]`)) continue;
      const tile = element('figure', 'tile');
      tile.dataset.taskId = id;
      const frame = element('iframe', 'tile-frame');
      frame.title = `the live desktop of ${id}`;
      const caption = element('figcaption', 'tile-caption');
      const open = element('button', 'link', String((task.spec && task.spec.prompt) || id).slice(0, 60));
      open.type = 'button';
      open.addEventListener('click', () => openTask(id));
      caption.append(open);
      tile.append(frame, caption);
      wall.append(tile);
      api('GET', taskPath(id, '/view?mode=view'))
        .then((link) => { frame.src = safeUrl(link.url) || 'about:blank'; })
        .catch((error) => { tile.dataset.unavailable = explain(error); frame.replaceWith(element('p', 'muted', `not available: ${explain(error)}`)); });
    }
    $('no-wall').hidden = shown.length > 0;
    $('wall-count').textContent = shown.length ? `${shown.length} running` : '';
  }

  // ---- one task -----------------------------------------------------------

  function openTask(id) {
    if (!TASK_ID.test(id)) return;
    closeTask();
    const selected = {
      id, task: null, lastSeq: 0, lastEventId: '', terminal: false, stream: null, refreshTimer: null, pinnedShot: null,
      events: [], held: false, liveMode: null,
    };
    state.selected = selected;
    if (window.location.hash !== `#${id}`) window.history.replaceState(null, '', `#${id}`);
    for (const row of $('tasks').tBodies[0].rows) row.classList.toggle('selected', row.dataset.taskId === id);
    const detail = $('detail');
    detail.dataset.taskId = id;
    detail.hidden = false;
    $('detail-id').textContent = id;
    loadTask(selected);
    follow(selected);
  }

  function closeTask() {
    const selected = state.selected;
    state.selected = null;
    if (selected) {
      clearTimeout(selected.refreshTimer);
      if (selected.stream) selected.stream.abort();
    }
    const detail = $('detail');
    detail.hidden = true;
    delete detail.dataset.taskId;
    for (const id of ['detail-id', 'detail-status', 'detail-code', 'detail-message', 'detail-prompt', 'stream-state', 'shot-caption']) {
      $(id).textContent = '';
    }
    $('detail-facts').replaceChildren();
    $('events').replaceChildren();
    window.FlotillaTimeline.render($('timeline'), []);
    $('shots').replaceChildren();
    $('shot-large').hidden = true;
    $('shot-image').removeAttribute('src');
    $('no-shots').hidden = false;
    $('shot-actions').textContent = '';
    clearOverlay();
    closeLive();
    for (const row of $('tasks').tBodies[0].rows) row.classList.remove('selected');
    if (window.location.hash) window.history.replaceState(null, '', window.location.pathname);
  }

  async function loadTask(selected) {
    const issued = (selected.reads = (selected.reads || 0) + 1);
    try {
      const task = await api('GET', taskPath(selected.id));
      if (state.selected !== selected) return;
      // Reads overlap under a burst of events: one that answers after a
      // read issued later has been shown is older news, and is dropped
      // (it may carry the same last_seq with less of the history).
      if (issued < (selected.shownRead || 0)) return;
      if (selected.task && Number(task.last_seq) < Number(selected.task.last_seq)) return;
      selected.shownRead = issued;
      selected.task = task;
      renderDetail(selected, task);
    } catch (error) {
      if (state.selected === selected) $('detail-message').textContent = explain(error);
    }
  }

  /** Reads the task again soon, once for a burst of events. */
  function refreshSoon(selected) {
    clearTimeout(selected.refreshTimer);
    selected.refreshTimer = setTimeout(() => loadTask(selected), DETAIL_REFRESH_MS);
  }

  function renderDetail(selected, task) {
    const status = $('detail-status');
    status.className = `status ${String(task.status).replace(/[^a-z]/g, '')}`;
    status.textContent = task.status;
    $('detail-code').textContent = task.code ? `code: ${task.code}` : '';
    $('cancel').hidden = TERMINAL.has(task.status);
    $('approve').hidden = task.status !== 'waiting';
    $('deny').hidden = task.status !== 'waiting' || selected.held;
    $('approve').hidden = task.status !== 'waiting' || selected.held;
    $('detail-prompt').textContent = (task.spec && task.spec.prompt) || '';
    renderFacts(task);
    renderLive(selected, task);
    renderShots(selected, listOf(task.screenshots));
  }

  // ---- the live desktop ---------------------------------------------------

  /** Shows the live pane while the task holds a desktop it can show. */
  function renderLive(selected, task) {
    const streamUrl = task.sandbox && task.sandbox.stream_url;
    const showable = typeof streamUrl === 'string' && streamUrl !== '' && (task.status === 'running' || task.status === 'waiting');
    $('live-pane').hidden = !showable;
    if (!showable) {
      closeLive();
      return;
    }
    $('take-over').hidden = selected.held;
    $('hand-back').hidden = !selected.held;
    $('release-message').hidden = !selected.held;
    if (!selected.liveMode) openLive(selected, 'view');
  }

  /** Loads a view of `mode` in the frame. */
  async function openLive(selected, mode, url) {
    selected.liveMode = mode;
    try {
      const link = url ? { url, mode } : await api('GET', taskPath(selected.id, `/view?mode=${mode}`));
      if (state.selected !== selected) return;
      const frame = $('live-frame');
      const next = safeUrl(link.url) || 'about:blank';
      // A view's token is in the URL's fragment: a new token for the same
      // page changes only the fragment, which would not load it again.
      const samePage = frame.src && frame.src.split('#')[0] === next.split('#')[0];
      frame.src = next;
      if (samePage && frame.contentWindow) frame.contentWindow.location.reload();
      frame.hidden = false;
      // The live frame is the newest screen: the large screenshot would
      // only repeat it, until a thumbnail is picked.
      $('detail').classList.toggle('live-on', !selected.pinnedShot);
      const label = $('live-mode');
      label.textContent = mode === 'control' ? 'control' : 'view only';
      label.className = `mode ${mode}`;
    } catch (error) {
      if (state.selected !== selected) return;
      // Not shown again until asked: a desktop that cannot be shown now
      // (its worker serves no views) is no error of the task's.
      selected.liveMode = 'unavailable';
      $('live-frame').hidden = true;
      const label = $('live-mode');
      label.textContent = `not available: ${explain(error)}`;
      label.className = 'mode';
    }
  }

  function closeLive() {
    $('detail').classList.remove('live-on');
    const frame = $('live-frame');
    frame.hidden = true;
    frame.removeAttribute('src');
    $('live-mode').textContent = '';
    $('live-pane').hidden = true;
    if (state.selected) state.selected.liveMode = null;
  }

  async function takeOver(button) {
    const selected = state.selected;
    if (!selected) return;
    button.disabled = true;
    $('detail-message').textContent = '';
    try {
      const answer = await api('POST', taskPath(selected.id, '/takeover'));
      if (state.selected !== selected) return;
      selected.held = true;
      await openLive(selected, 'control', answer.view && answer.view.url);
      refreshSoon(selected);
    } catch (error) {
      if (state.selected === selected) $('detail-message').textContent = explain(error);
    } finally {
      button.disabled = false;
    }
  }

  async function handBack(button) {
    const selected = state.selected;
    if (!selected) return;
    const message = $('release-message').value.trim();
    button.disabled = true;
    $('detail-message').textContent = '';
    try {
      await api('POST', taskPath(selected.id, '/release'), message ? { message } : {});
      if (state.selected !== selected) return;
      selected.held = false;
      $('release-message').value = '';
      await openLive(selected, 'view');
      refreshSoon(selected);
    } catch (error) {
      if (state.selected === selected) $('detail-message').textContent = explain(error);
    } finally {
      button.disabled = false;
    }
  }

  function renderFacts(task) {
    const spec = task.spec || {};
    const result = task.result && typeof task.result === 'object' ? task.result.text : task.result;
    const facts = [
      ['pipeline', spec.pipeline],
      ['priority', task.priority],
      ['batch', task.batch_id],
      ['attempts', task.attempts],
      ['steps', task.current_step ? `${task.steps_taken} (step ${task.current_step})` : task.steps_taken],
      ['created', localTime(task.created_at)],
      ['started', localTime(task.started_at)],
      ['finished', localTime(task.finished_at)],
      ['sandbox', task.sandbox && task.sandbox.id],
      ['result', result],
      ['error', task.error],
    ];
    const nodes = [];
    for (const [name, value] of facts) {
      if (value === undefined || value === null || value === '') continue;
      nodes.push(element('dt', '', name), element('dd', '', typeof value === 'object' ? JSON.stringify(value) : value));
    }
    $('detail-facts').replaceChildren(...nodes);
  }

  // ---- screenshots --------------------------------------------------------

  /** Adds thumbnails for new screenshots; shows the newest large unless one was picked. */
  function renderShots(selected, shots) {
    const strip = $('shots');
    const known = new Set(Array.from(strip.children, (img) => img.dataset.seq));
    const ordered = shots
      .filter((shot) => shot && Number.isFinite(Number(shot.seq)) && safeUrl(shot.url))
      .sort((a, b) => Number(a.seq) - Number(b.seq));
    for (const shot of ordered) {
      const seq = String(shot.seq);
      if (known.has(seq)) continue;
      const thumb = element('img');
      thumb.dataset.seq = seq;
      thumb.alt = `screenshot ${seq}`;
      thumb.title = `#${seq} ${String(shot.hash || '').slice(0, 12)}`;
      thumb.loading = 'lazy';
      thumb.src = safeUrl(shot.url);
      strip.append(thumb);
    }
    $('no-shots').hidden = ordered.length > 0;
    if (ordered.length === 0) return;
    const pinned = ordered.findIndex((shot) => String(shot.seq) === selected.pinnedShot);
    const index = pinned >= 0 ? pinned : ordered.length - 1;
    showLarge(selected, ordered[index], index + 1, ordered.length);
  }

  function showLarge(selected, shot, position, count) {
    const seq = String(shot.seq);
    const image = $('shot-image');
    const actions = actionsOn(selected, seq);
    const draw = () => drawActions(image, actions);
    if (image.dataset.seq !== seq) {
      image.dataset.seq = seq;
      clearOverlay();
      image.onload = draw;
      image.src = safeUrl(shot.url);
    } else if (image.complete) {
      draw();
    }
    $('shot-large').hidden = false;
    const calls = usageOn(selected, seq).map(describeUsage);
    const caption = `screenshot ${position} of ${count} (event ${seq}), ${String(shot.hash || '').slice(0, 12)}`;
    $('shot-caption').textContent = calls.length ? `${caption} · model: ${calls.join('; ')}` : caption;
    $('shot-actions').textContent = actions.length ? `then: ${actions.map(describeAction).join('; ')}` : '';
    for (const thumb of $('shots').children) thumb.classList.toggle('current', thumb.dataset.seq === seq);
  }

  /** Steps to the screenshot before (-1) or after (+1) the one shown. */
  function stepShot(delta) {
    const selected = state.selected;
    if (!selected || !selected.task) return;
    const seqs = Array.from($('shots').children, (img) => img.dataset.seq);
    if (seqs.length === 0) return;
    const at = seqs.indexOf($('shot-image').dataset.seq);
    const next = Math.min(Math.max((at < 0 ? seqs.length - 1 : at) + delta, 0), seqs.length - 1);
    selected.pinnedShot = seqs[next];
    renderShots(selected, selected.task.screenshots || []);
  }

  /**
   * The actions done on the screen of screenshot event `seq`: a screenshot
   * event's `step` counts the actions taken before it was captured, so the
   * actions completed after that many, up to the next screenshot's count.
   */
  function actionsOn(selected, seq) {
    const events = selected.events;
    let start = 0;
    for (let i = 0; i < events.length; i += 1) if (events[i].type === 'started') start = i;
    const latest = events.slice(start);
    const shots = latest.filter((e) => e.type === 'screenshot' && Number.isFinite(e.step));
    const at = shots.findIndex((e) => String(e.seq) === seq);
    if (at < 0) return [];
    const from = shots[at].step;
    const to = at + 1 < shots.length ? shots[at + 1].step : Infinity;
    const done = latest.filter((e) => e.type === 'action_completed').map((e) => e.action);
    return done.slice(from, to).filter((a) => a && typeof a === 'object');
  }

  /**
   * The model calls answered on the screen of screenshot event `seq`: the
   * `usage` events whose `step` is the actions taken when it was captured.
   */
  function usageOn(selected, seq) {
    const events = selected.events;
    let start = 0;
    for (let i = 0; i < events.length; i += 1) if (events[i].type === 'started') start = i;
    const latest = events.slice(start);
    const shot = latest.find((e) => e.type === 'screenshot' && String(e.seq) === seq);
    if (!shot || !Number.isFinite(shot.step)) return [];
    return latest.filter((e) => e.type === 'usage' && e.step === shot.step);
  }

  /** One model call's tokens and cost, as the player and the log show it. */
  function describeUsage(event) {
    const cost = event.cost_usd == null ? 'cost unknown' : dollars(event.cost_usd);
    const cached = `${event.cache_read_tokens || 0} cached, ${event.cache_write_tokens || 0} written`;
    return `${event.input_tokens} in (${cached}), ${event.output_tokens} out, ${cost}`;
  }

  function clearOverlay() {
    const overlay = $('shot-overlay');
    overlay.width = 0;
    overlay.height = 0;
  }

  /** Draws `actions` over the screenshot, in the screen's own pixels. */
  function drawActions(image, actions) {
    const overlay = $('shot-overlay');
    overlay.width = image.naturalWidth;
    overlay.height = image.naturalHeight;
    overlay.style.width = `${image.clientWidth}px`;
    overlay.style.height = `${image.clientHeight}px`;
    overlay.style.left = `${image.offsetLeft + image.clientLeft}px`;
    overlay.style.top = `${image.offsetTop + image.clientTop}px`;
    const ctx = overlay.getContext('2d');
    ctx.clearRect(0, 0, overlay.width, overlay.height);
    const unit = Math.max(2, Math.round(overlay.width / 400));
    let line = 0;
    const label = (text) => {
      ctx.font = `${8 * unit}px sans-serif`;
      const y = overlay.height - 12 * unit * (line + 1);
      ctx.fillStyle = 'rgba(0, 0, 0, 0.7)';
      ctx.fillRect(4 * unit, y - 9 * unit, ctx.measureText(text).width + 6 * unit, 12 * unit);
      ctx.fillStyle = '#ffff00';
      ctx.fillText(text, 7 * unit, y);
      line += 1;
    };
    for (const action of actions) {
      const point = Number.isFinite(action.x) && Number.isFinite(action.y);
      if (point && action.type !== 'scroll' && action.type !== 'move') {
        ctx.fillStyle = 'rgba(255, 0, 0, 1)';
        ctx.beginPath();
        ctx.arc(action.x + 0.5, action.y + 0.5, 3 * unit, 0, 2 * Math.PI);
        ctx.fill();
        ctx.strokeStyle = 'rgba(255, 0, 0, 1)';
        ctx.lineWidth = unit;
        ctx.beginPath();
        ctx.arc(action.x + 0.5, action.y + 0.5, 8 * unit, 0, 2 * Math.PI);
        ctx.stroke();
      } else if (point) {
        ctx.strokeStyle = 'rgba(0, 120, 255, 1)';
        ctx.lineWidth = unit;
        ctx.beginPath();
        ctx.arc(action.x + 0.5, action.y + 0.5, 6 * unit, 0, 2 * Math.PI);
        ctx.stroke();
      }
      if (action.type === 'drag' && Array.isArray(action.path) && action.path.length > 0) {
        ctx.strokeStyle = 'rgba(255, 0, 0, 1)';
        ctx.lineWidth = unit;
        ctx.beginPath();
        action.path.forEach(([x, y], i) => (i === 0 ? ctx.moveTo(x + 0.5, y + 0.5) : ctx.lineTo(x + 0.5, y + 0.5)));
        ctx.stroke();
      }
      if (action.type === 'type' || action.type === 'keypress') label(describeAction(action));
    }
  }

  function pickShot(event) {
    const thumb = event.target.closest('img[data-seq]');
    const selected = state.selected;
    if (!thumb || !selected || !selected.task) return;
    selected.pinnedShot = thumb.dataset.seq;
    $('detail').classList.remove('live-on');
    renderShots(selected, selected.task.screenshots || []);
  }

  // ---- the event stream ---------------------------------------------------

  /**
   * A Server-Sent Events parser: feed it decoded text in any chunks; it calls
   * onFrame({id, event, data}) for each complete frame and onRetry(ms) for a
   * `retry:` field.
   */
  class SseParser {
    constructor(onFrame, onRetry) {
      this.onFrame = onFrame;
      this.onRetry = onRetry;
      this.buffer = '';
      this.data = [];
      this.event = '';
      this.lastId = '';
    }

    push(text) {
      this.buffer += text;
      for (;;) {
        const end = /\r\n|\r|\n/.exec(this.buffer);
        if (!end) return;
        // A lone CR at the end may be the first half of CRLF: wait for more.
        if (end[0] === '\r' && end.index === this.buffer.length - 1) return;
        const line = this.buffer.slice(0, end.index);
        this.buffer = this.buffer.slice(end.index + end[0].length);
        this.line(line);
      }
    }

    line(line) {
      if (line === '') {
        this.dispatch();
        return;
      }
      if (line[0] === ':') return;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value[0] === ' ') value = value.slice(1);
      if (field === 'data') this.data.push(value);
      else if (field === 'event') this.event = value;
      else if (field === 'id' && !value.includes('\0')) this.lastId = value;
      else if (field === 'retry' && /^\d+$/.test(value)) this.onRetry(Number(value));
    }

    dispatch() {
      const frame = { id: this.lastId, event: this.event || 'message', data: this.data.join('\n') };
      const empty = this.data.length === 0;
      this.data = [];
      this.event = '';
      if (!empty) this.onFrame(frame);
    }
  }

  /** Follows the task's events until the terminal one, reconnecting after drops. */
  async function follow(selected) {
    const controller = new AbortController();
    selected.stream = controller;
    let retry = RECONNECT_MIN_MS;
    let delay = retry;
    while (state.selected === selected && !controller.signal.aborted) {
      try {
        await readStream(selected, controller.signal, () => { delay = retry; }, (ms) => { retry = Math.max(ms, 100); });
      } catch (error) {
        if (controller.signal.aborted || state.selected !== selected) return;
        if (error && (error.status === 400 || error.status === 401 || error.status === 404)) {
          $('stream-state').textContent = '';
          $('detail-message').textContent = explain(error);
          return;
        }
      }
      if (selected.terminal) {
        $('stream-state').textContent = 'ended';
        return;
      }
      $('stream-state').textContent = 'reconnecting';
      await sleep(delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
  }

  async function readStream(selected, signal, onOpen, onRetry) {
    const headers = authHeaders({ Accept: 'text/event-stream' });
    if (selected.lastEventId) headers['Last-Event-ID'] = selected.lastEventId;
    const response = await fetch(taskPath(selected.id, '/events'), { headers, signal, cache: 'no-store' });
    if (!response.ok) throw await errorOf(response);
    onOpen();
    $('stream-state').textContent = 'following';
    const parser = new SseParser((frame) => onFrame(selected, frame), onRetry);
    await pump(response, parser);
  }

  /** Feeds the body of an event stream to its parser until the stream ends. */
  async function pump(response, parser) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(decoder.decode(value, { stream: true }));
    }
    parser.push(decoder.decode());
  }

  function onFrame(selected, frame) {
    if (state.selected !== selected) return;
    if (frame.id) selected.lastEventId = frame.id;
    const event = frameEvent(frame);
    if (!event) return;
    const seq = Number(event.seq);
    if (Number.isFinite(seq)) {
      if (seq <= selected.lastSeq) return;
      selected.lastSeq = seq;
    }
    $('events').append(eventItem(event));
    selected.events.push(event);
    window.FlotillaTimeline.render($('timeline'), selected.events);
    if (event.type === 'takeover') selected.held = true;
    if (event.type === 'released' || TERMINAL.has(event.type)) selected.held = false;
    if (TERMINAL.has(event.type)) selected.terminal = true;
    refreshSoon(selected);
  }

  function eventItem(event) {
    const type = String(event.type || 'event');
    const item = element('li');
    item.dataset.type = type;
    item.dataset.seq = String(event.seq);
    if (TERMINAL.has(type)) item.classList.add('terminal');
    if (type === 'failed' || type === 'retrying') item.classList.add('failed');
    if (type === 'waiting') item.classList.add('waiting');
    item.append(
      element('span', 'seq', event.seq),
      element('span', 'ts', clockTime(event.ts)),
      element('span', 'type', type),
      element('span', 'text', describe(event)),
    );
    return item;
  }

  function joined(parts) {
    return parts.filter((p) => p !== undefined && p !== null && p !== '' && p !== false).map(String).join(' · ');
  }

  function describeAction(action) {
    if (!action || typeof action !== 'object') return '';
    const at = Number.isFinite(action.x) ? `(${action.x}, ${action.y})` : '';
    switch (action.type) {
      case 'click': return joined(['click', at, action.button]);
      case 'double_click': return joined(['double click', at]);
      case 'move': return joined(['move', at]);
      case 'scroll': return joined(['scroll', at, `by (${action.scroll_x}, ${action.scroll_y})`]);
      case 'drag': return joined(['drag', Array.isArray(action.path) ? `${action.path.length} points` : '']);
      case 'type': return `type ${JSON.stringify(String(action.text || ''))}`;
      case 'keypress': return `keys ${Array.isArray(action.keys) ? action.keys.join('+') : ''}`;
      case 'wait': return `wait ${duration(action.ms)}`;
      default: return String(action.type || JSON.stringify(action));
    }
  }

  function describe(event) {
    switch (event.type) {
      case 'queued':
      case 'started': return joined([event.attempt ? `attempt ${event.attempt}` : '', event.worker ? `worker ${event.worker}` : '']);
      case 'sandbox_ready': return joined([event.sandbox_id, event.warm ? 'warm' : 'cold', duration(event.ms)]);
      case 'plan': return Array.isArray(event.steps) ? event.steps.map((s, i) => `${i + 1}. ${s}`).join('\n') : '';
      case 'step_started': return joined([`step ${event.index}`, event.text]);
      case 'reasoning': return String(event.text || '');
      case 'usage': return joined([event.model, describeUsage(event)]);
      case 'action': return describeAction(event.action);
      case 'action_completed': return joined([describeAction(event.action), duration(event.ms)]);
      case 'screenshot': return joined([String(event.hash || '').slice(0, 12), `${event.bytes} bytes`, event.dedup ? 'already stored' : '']);
      case 'block': return JSON.stringify(event.block).slice(0, 400);
      case 'file': return joined([event.op, event.path, event.op === 'write' ? `${event.bytes} bytes` : '']);
      case 'waiting': return joined([event.code, event.message]);
      case 'takeover': return 'a person drives the desktop';
      case 'released': return joined(['handed back', event.message]);
      case 'resumed': return joined([`attempt ${event.attempt}`, `from step ${event.from_step}`, event.sandbox_id, event.interrupted ? 'an action was in flight' : '']);
      case 'retrying': return joined([`attempt ${event.attempt}`, `in ${duration(event.delay_ms)}`, event.error]);
      case 'succeeded': return joined([event.code, event.result && typeof event.result === 'object' ? event.result.text : event.result]);
      case 'failed': return joined([event.code, event.error]);
      case 'cancelled': return String(event.code || '');
      default: return '';
    }
  }

  // ---- actions on the open task ------------------------------------------

  async function act(button, path, body) {
    const selected = state.selected;
    if (!selected) return;
    button.disabled = true;
    $('detail-message').textContent = '';
    try {
      await api('POST', taskPath(selected.id, path), body);
      refreshSoon(selected);
      boardSoon();
    } catch (error) {
      if (state.selected === selected) $('detail-message').textContent = explain(error);
    } finally {
      button.disabled = false;
    }
  }

  // ---- webhooks and their deliveries -------------------------------------

  function hooksSoon(ms) {
    clearTimeout(state.hooksTimer);
    state.hooksTimer = setTimeout(refreshHooks, ms);
  }

  // ---- usage: tokens (cached and not), cost and sandbox seconds per day ----

  const DAY_S = 86400;

  /** The UTC day `back` days before today, as `YYYY-MM-DD`. */
  function utcDayBefore(back) {
    return new Date(Date.now() - back * DAY_S * 1000).toISOString().slice(0, 10);
  }

  /** Reads the tenant's usage of the days picked (today and the days before) and draws it. */
  async function refreshUsage() {
    if (!state.key) return;
    const shown = Math.max(1, Number($('usage-days').value) || 30);
    try {
      renderUsage(await api('GET', `/v1/usage?from=${utcDayBefore(shown - 1)}&to=${utcDayBefore(0)}`));
    } catch (error) {
      $('usage-limits').textContent = explain(error);
    }
  }

  function sumOf(map) {
    return Object.values(map || {}).reduce((a, b) => a + (Number(b) || 0), 0);
  }

  function renderUsage(report) {
    const days = listOf(report && report.days);
    $('usage-range').textContent = report ? `${report.from} to ${report.to}` : '';
    $('usage').tBodies[0].replaceChildren(...days.map((d) => {
      const row = element('tr');
      row.dataset.day = String(d.day);
      row.append(
        cell(d.day),
        cell(sumOf(d.tasks), 'num'),
        cell(d.input_tokens, 'num'),
        cell(d.cache_read_tokens || 0, 'num'),
        cell(d.output_tokens, 'num'),
        cell(dollars(d.cost_usd), 'num'),
        cell((sumOf(d.sandbox_ms) / 1000).toFixed(1), 'num'),
        cell(d.steps, 'num'),
      );
      return row;
    }));
    const limits = (report && report.limits) || {};
    const parts = [`queued ${limits.queued} of ${limits.max_queued}`];
    if (limits.max_tokens_per_day != null) parts.push(`tokens today ${limits.tokens_today} of ${limits.max_tokens_per_day}`);
    else parts.push(`tokens today ${limits.tokens_today}`);
    if (limits.max_cost_usd_per_day != null) parts.push(`cost today ${dollars(limits.cost_today_usd)} of ${dollars(limits.max_cost_usd_per_day)}`);
    else parts.push(`cost today ${dollars(limits.cost_today_usd)}`);
    if (limits.max_sandboxes != null) parts.push(`max sandboxes ${limits.max_sandboxes}`);
    if (limits.rate) parts.push(`rate ${limits.rate.per_second}/s (burst ${limits.rate.burst})`);
    $('usage-limits').textContent = parts.join(' · ');
    drawUsage(report, days);
  }

  /** Dollars as the dashboard shows them: four decimals below a cent. */
  function dollars(usd) {
    const n = Number(usd) || 0;
    return `$${n < 0.01 && n > 0 ? n.toFixed(4) : n.toFixed(2)}`;
  }

  /** Seconds since the epoch of a `YYYY-MM-DD` UTC day. */
  function daySeconds(day) {
    return Date.parse(`${day}T00:00:00Z`) / 1000;
  }

  /**
   * Where the x axis puts its labels: the first and the last day asked and
   * evenly spaced days between, at most about eight.
   */
  function dayTicks(first, last) {
    const count = Math.round((last - first) / DAY_S) + 1;
    const step = Math.ceil(count / 8) * DAY_S;
    const ticks = [];
    for (let t = first; t <= last; t += step) ticks.push(t);
    if (ticks[ticks.length - 1] !== last) {
      if (last - ticks[ticks.length - 1] < step / 2 && ticks.length > 1) ticks.pop();
      ticks.push(last);
    }
    return ticks;
  }

  /**
   * Input tokens read from the prompt cache and not (left axis), the cost
   * (right axis) and sandbox seconds for every day of the range asked (days
   * without use at zero), with uPlot. The x axis spans
   * exactly that range; the labels drawn are kept on the chart's box
   * (`data-x-labels`) for whoever reads the page.
   */
  function drawUsage(report, days) {
    const box = $('usage-chart');
    if (state.usageChart) state.usageChart.destroy();
    state.usageChart = null;
    delete box.dataset.xLabels;
    if (typeof uPlot !== 'function' || !report || days.length === 0) {
      box.textContent = days.length === 0 ? 'Nothing used in these days.' : '';
      return;
    }
    box.textContent = '';
    const first = daySeconds(report.from);
    const last = daySeconds(report.to);
    const byDay = new Map(days.map((d) => [daySeconds(d.day), d]));
    const x = [];
    for (let t = first; t <= last; t += DAY_S) x.push(t);
    const of = (field) => x.map((t) => { const d = byDay.get(t); return d ? Number(d[field]) || 0 : 0; });
    const cached = of('cache_read_tokens');
    const uncached = of('input_tokens').map((n, i) => Math.max(n - cached[i], 0));
    const cost = of('cost_usd');
    const seconds = x.map((t) => { const d = byDay.get(t); return d ? sumOf(d.sandbox_ms) / 1000 : 0; });
    const label = (t) => new Date(t * 1000).toISOString().slice(0, 10);
    const fromZero = (u, lo, hi) => [0, Math.max(hi, 1)];
    const options = {
      width: Math.max(box.clientWidth, 320),
      height: 200,
      legend: { live: false },
      scales: { x: { time: true, range: () => [first - DAY_S / 2, last + DAY_S / 2] }, tokens: { range: fromZero }, usd: { range: (u, lo, hi) => [0, Math.max(hi, 0.01)] }, seconds: { range: fromZero } },
      series: [
        { label: 'day' },
        { label: 'uncached in', scale: 'tokens', stroke: '#2563eb', fill: 'rgba(37,99,235,0.12)', width: 2, points: { size: 6 } },
        { label: 'cached in', scale: 'tokens', stroke: '#16a34a', fill: 'rgba(22,163,74,0.12)', width: 2, points: { size: 6 } },
        { label: 'cost $', scale: 'usd', stroke: '#dc2626', width: 2, points: { size: 6 }, value: (u, v) => (v == null ? '' : dollars(v)) },
        { label: 'sandbox s', scale: 'seconds', stroke: '#d97706', width: 2, points: { size: 6 } },
      ],
      axes: [
        {
          splits: () => dayTicks(first, last),
          values: (u, splits) => { const labels = splits.map(label); box.dataset.xLabels = labels.join(','); return labels; },
        },
        { scale: 'tokens', label: 'input tokens' },
        { scale: 'usd', label: 'cost $', side: 1, grid: { show: false } },
      ],
    };
    state.usageChart = new uPlot(options, [x, uncached, cached, cost, seconds], box);
  }

  /** Reads the webhooks, and the deliveries of the one picked (the first by default). */
  async function refreshHooks() {
    clearTimeout(state.hooksTimer);
    if (!state.key) return;
    try {
      const page = await api('GET', '/v1/webhooks?limit=50');
      const hooks = listOf(page && page.webhooks);
      if (!hooks.some((hook) => hook.id === state.hookId)) state.hookId = hooks.length ? String(hooks[0].id) : null;
      renderHooks(hooks);
      let pending = false;
      if (state.hookId) {
        const path = `/v1/webhooks/${encodeURIComponent(state.hookId)}/deliveries?limit=${DELIVERIES_SHOWN}`;
        const log = await api('GET', path);
        const deliveries = listOf(log && log.deliveries);
        renderDeliveries(deliveries);
        pending = deliveries.some((d) => d.status === 'pending');
      }
      state.hooksRead += 1;
      $('webhooks').dataset.reads = String(state.hooksRead);
      if (pending) hooksSoon(PENDING_REFRESH_MS);
    } catch (error) {
      if (state.key) $('hooks-message').textContent = explain(error);
    }
  }

  function renderHooks(hooks) {
    const rows = hooks.map((hook) => {
      const row = element('tr');
      row.dataset.webhookId = String(hook.id);
      if (hook.id === state.hookId) row.classList.add('selected');
      const events = Array.isArray(hook.events) ? hook.events.join(', ') : '';
      const standing = hook.disabled ? `disabled${hook.disabled_reason ? `: ${hook.disabled_reason}` : ''}` : 'active';
      row.append(cell(hook.id, 'id'), cell(hook.url), cell(events), cell(standing));
      return row;
    });
    $('webhooks').tBodies[0].replaceChildren(...rows);
    $('no-webhooks').hidden = hooks.length > 0;
    $('deliveries-pane').hidden = !state.hookId;
    $('deliveries-of').textContent = state.hookId || '';
    $('hooks-message').textContent = '';
  }

  function renderDeliveries(deliveries) {
    const rows = deliveries.map((d) => {
      const row = element('tr');
      row.dataset.msgId = String(d.msg_id);
      row.dataset.status = String(d.status);
      const status = cell('', 'status-cell');
      status.append(statusBadge(d.status));
      row.append(
        cell(d.msg_id, 'id'),
        cell(d.type),
        status,
        cell(d.attempts, 'num'),
        cell(d.response_code == null ? '' : d.response_code, 'num'),
        cell(d.latency_ms == null ? '' : `${d.latency_ms} ms`, 'num'),
        cell(d.error || ''),
        cell(d.last_attempt_at ? shortTime(d.last_attempt_at) : ''),
      );
      return row;
    });
    $('deliveries').tBodies[0].replaceChildren(...rows);
    $('no-deliveries').hidden = deliveries.length > 0;
  }

  function pickHook(event) {
    const row = event.target.closest('tr[data-webhook-id]');
    if (!row || !WEBHOOK_ID.test(row.dataset.webhookId)) return;
    state.hookId = row.dataset.webhookId;
    refreshHooks();
  }

  // ---- wiring -------------------------------------------------------------

  function wire() {
    $('key-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const key = $('key-input').value.trim();
      if (key) signIn(key);
    });
    $('sign-out').addEventListener('click', () => signOut(''));
    $('tasks').tBodies[0].addEventListener('click', (event) => {
      const row = event.target.closest('tr[data-task-id]');
      if (row) openTask(row.dataset.taskId);
    });
    $('close-detail').addEventListener('click', closeTask);
    $('webhooks').tBodies[0].addEventListener('click', pickHook);
    $('refresh-hooks').addEventListener('click', refreshHooks);
    $('refresh-usage').addEventListener('click', refreshUsage);
    $('usage-days').addEventListener('change', refreshUsage);
    $('task-search').addEventListener('input', applySearch);
    $('task-status').addEventListener('change', refreshBoard);
    $('task-batch').addEventListener('change', refreshBoard);
    $('shots').addEventListener('click', pickShot);
    $('cancel').addEventListener('click', (event) => act(event.currentTarget, '/cancel'));
    $('approve').addEventListener('click', (event) => act(event.currentTarget, '/input', { decision: 'approve' }));
    $('deny').addEventListener('click', (event) => act(event.currentTarget, '/input', { decision: 'deny' }));
    $('watch').addEventListener('click', () => state.selected && openLive(state.selected, 'view'));
    $('take-over').addEventListener('click', (event) => takeOver(event.currentTarget));
    $('hand-back').addEventListener('click', (event) => handBack(event.currentTarget));
    document.addEventListener('keydown', (event) => {
      if (!state.selected || event.altKey || event.ctrlKey || event.metaKey) return;
      const target = event.target;
      if (target && (target.tagName === 'INPUT' || target.tagName === 'TEXTAREA')) return;
      if (event.key === 'ArrowLeft' || event.key === 'ArrowRight') {
        event.preventDefault();
        stepShot(event.key === 'ArrowLeft' ? -1 : 1);
      }
    });
  }

  function start() {
    wire();
    const saved = sessionStorage.getItem(KEY_STORAGE);
    if (saved) signIn(saved);
    else $('key-input').focus();
  }

  start();
})();
