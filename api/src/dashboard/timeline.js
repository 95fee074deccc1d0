// Flotilla dashboard: one task's timeline, drawn from its events. Lanes
// share one time axis, from the first event to the last: steps
// (`step_started`), model calls (`usage`), actions (`action_completed`),
// waits (from `waiting` until a person answers: `input`, `released`, or the
// task goes on or ends), a person holding the desktop (`takeover` until
// `released`) and attempts (`started`, `resumed`, `retrying`). Each mark
// carries its event's seq; the summary counts them in words. dashboard.js
// calls FlotillaTimeline.render with the events it has; every string
// reaches the page through textContent or an attribute, never as markup.
'use strict';

window.FlotillaTimeline = (function () {
  /** The lanes: a label, and the event types drawn as points on it. */
  const LANES = [
    { lane: 'steps', label: 'steps', points: ['step_started'] },
    { lane: 'model', label: 'model calls', points: ['usage'] },
    { lane: 'actions', label: 'actions', points: ['action_completed'] },
    { lane: 'waits', label: 'waits', points: [] },
    { lane: 'held', label: 'taken over', points: [] },
    { lane: 'attempts', label: 'attempts', points: ['started', 'resumed', 'retrying'] },
  ];
  /** What ends a wait for a person. */
  const ANSWERS = new Set(['input', 'released', 'action', 'action_completed', 'usage', 'succeeded', 'failed', 'cancelled']);

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function plural(count, noun) {
    return `${count} ${noun}${count === 1 ? '' : 's'}`;
  }

  function seconds(ms) {
    return ms < 10000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`;
  }

  /** The spans of `events` from an event of `open` to the next of `close` (still open: to the last event). */
  function spans(events, open, close) {
    const found = [];
    let start = null;
    for (const event of events) {
      if (start === null && event.type === open) start = event;
      else if (start !== null && close(event.type)) {
        found.push([start, event]);
        start = null;
      }
    }
    if (start !== null) found.push([start, null]);
    return found;
  }

  /** The lanes' marks and the summary of `events`, each with its time in ms. */
  function layout(events) {
    const timed = events.map((e) => ({ ...e, ms: Date.parse(e.ts) })).filter((e) => Number.isFinite(e.ms));
    if (!timed.length) return null;
    const from = timed[0].ms;
    const to = Math.max(timed[timed.length - 1].ms, from + 1);
    const at = (ms) => (100 * (ms - from)) / (to - from);
    const lanes = {};
    for (const { lane, points } of LANES) {
      lanes[lane] = timed.filter((e) => points.includes(e.type)).map((e) => ({ left: at(e.ms), seq: e.seq, type: e.type }));
    }
    const waits = spans(timed, 'waiting', (t) => ANSWERS.has(t));
    const held = spans(timed, 'takeover', (t) => t === 'released' || t === 'succeeded' || t === 'failed' || t === 'cancelled');
    const asSpan = ([start, end]) => {
      const stop = end ? end.ms : to;
      return { left: at(start.ms), width: Math.max(at(stop) - at(start.ms), 0.5), seq: start.seq, ms: stop - start.ms, type: start.type };
    };
    lanes.waits = waits.map(asSpan);
    lanes.held = held.map(asSpan);
    return { lanes, total: to - from };
  }

  /** `2 steps · 3 model calls · 5 actions · 1 wait (4.2 s) · resumed once`. */
  function summary(drawn) {
    const { lanes } = drawn;
    const waited = lanes.waits.reduce((n, w) => n + w.ms, 0);
    const parts = [
      plural(lanes.steps.length, 'step'),
      plural(lanes.model.length, 'model call'),
      plural(lanes.actions.length, 'action'),
      lanes.waits.length ? `${plural(lanes.waits.length, 'wait')} (${seconds(waited)})` : plural(0, 'wait'),
    ];
    if (lanes.held.length) parts.push(`taken over ${plural(lanes.held.length, 'time')}`);
    const resumed = lanes.attempts.filter((m) => m.type === 'resumed').length;
    if (resumed) parts.push(`resumed ${plural(resumed, 'time')}`);
    return `${parts.join(' · ')} over ${seconds(drawn.total)}`;
  }

  /** Draws the timeline of `events` into `container` (emptied when there are none). */
  function render(container, events) {
    const drawn = layout(events);
    if (!drawn) {
      container.replaceChildren();
      container.hidden = true;
      return;
    }
    const rows = LANES.map(({ lane, label }) => {
      const row = element('div', 'lane');
      row.dataset.lane = lane;
      row.dataset.count = String(drawn.lanes[lane].length);
      const track = element('div', 'track');
      for (const mark of drawn.lanes[lane]) {
        const node = element('span', mark.width === undefined ? 'point' : 'span');
        node.dataset.seq = String(mark.seq);
        node.dataset.type = String(mark.type);
        node.style.left = `${mark.left}%`;
        if (mark.width !== undefined) node.style.width = `${mark.width}%`;
        node.title = mark.width === undefined ? `#${mark.seq} ${mark.type}` : `#${mark.seq} ${mark.type}, ${seconds(mark.ms)}`;
        track.append(node);
      }
      row.append(element('span', 'lane-label', `${label} (${drawn.lanes[lane].length})`), track);
      return row;
    });
    const words = element('p', 'timeline-summary', summary(drawn));
    container.replaceChildren(words, ...rows);
    container.hidden = false;
  }

  return { render };
})();
