// The Timeline tab of the flue dev console: one submission's model calls, tool calls, tasks
// (their own steps nested), compactions, hook decisions and pauses as bars on a time axis,
// with durations, tokens and cost as text and the slowest step marked.
//
// It reads GET /_flue/dev/timeline/<agent>/<id>[?submission=ID] (computed on the server from
// the stored log) and uses the console's helpers (h, encode, durationText, state). It redraws
// when the tab opens and whenever the console reloads the transcript (a reply settled, another
// conversation was opened), and every second while the drawn submission still runs.
'use strict';

const timeline = {
  body: null,       // the last answer of the timeline route
  chosen: null,     // the submission picked in the list (null: the latest)
  key: null,        // `${agent}/${conversation}` the answer is about
  timer: null,      // the redraw timer while a submission runs
};

function timelineVisible() {
  const panel = document.getElementById('tab-timeline');
  return Boolean(panel && !panel.hidden);
}

async function refreshTimeline() {
  if (!state.agent || !timelineVisible()) return;
  const key = `${state.agent}/${state.conversation}`;
  if (timeline.key !== key) { timeline.key = key; timeline.chosen = null; timeline.body = null; }
  const query = timeline.chosen ? `?submission=${encodeURIComponent(timeline.chosen)}` : '';
  try {
    const response = await fetch(`/_flue/dev/timeline/${encode(state.agent)}/${encode(state.conversation)}${query}`, { cache: 'no-store' });
    if (timeline.key !== `${state.agent}/${state.conversation}`) return;
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      if (timeline.chosen) { timeline.chosen = null; refreshTimeline(); return; }
      renderTimelineError((body.error && body.error.message) || `The server answered ${response.status}.`);
      return;
    }
    timeline.body = body;
    renderTimeline();
  } catch (err) {
    renderTimelineError(`Cannot reach flue dev: ${err.message}`);
  }
  clearTimeout(timeline.timer);
  const drawn = timeline.body && timeline.body.timeline;
  if (drawn && !drawn.outcome) timeline.timer = setTimeout(refreshTimeline, 1000);
}

function renderTimelineError(text) {
  document.getElementById('tab-timeline').replaceChildren(h('p', { class: 'run-state error' }, text));
}

function costText(usd) {
  return `$${usd.toFixed(usd < 0.01 ? 5 : 3)}`;
}

function tokensText(usage) {
  if (!usage) return '';
  const cached = (usage.cache_read_tokens || 0) + (usage.cache_write_tokens || 0);
  const parts = [`${(usage.input_tokens || 0).toLocaleString()} in`, `${(usage.output_tokens || 0).toLocaleString()} out`];
  if (cached) parts.push(`${cached.toLocaleString()} cached`);
  if (typeof usage.cost_usd === 'number') parts.push(costText(usage.cost_usd));
  return parts.join(' · ');
}

// A start estimated because it was not recorded. A running step's start is estimated too (it
// is written with its end), which is no news: only a finished one is marked.
function oldStart(step) {
  return Boolean(step.estimated && !step.running);
}

const KIND_NAMES = {
  model: 'model', failed_model: 'model ✕', tool: 'tool', task: 'task', compaction: 'compact',
  hook: 'hook', pause: 'pause', sampling: 'sampling',
};

// One step: a line of text (kind, what, duration, tokens) over its bar on the axis, then its
// nested steps (a task's) indented.
function renderStep(step, span, depth) {
  const bar = h('div', { class: `tl-bar tl-${step.kind}${step.slowest ? ' tl-slow' : ''}${step.running ? ' tl-running' : ''}` });
  bar.style.left = `${(100 * step.start) / span}%`;
  bar.style.width = `max(2px, ${(100 * step.durationMs) / span}%)`;
  const facts = [durationText(step.durationMs) + (step.running ? ' so far' : ''), tokensText(step.usage)].filter(Boolean).join(' · ');
  const title = [step.detail, oldStart(step) ? 'start estimated (not recorded)' : '', `starts at +${durationText(step.start)}`].filter(Boolean).join(' · ');
  const row = h('div', {
    class: `tl-step${step.error ? ' error' : ''}${step.slowest ? ' slowest' : ''}`,
    'data-kind': step.kind,
    'data-depth': String(depth),
    title,
  },
  h('div', { class: 'tl-line' },
    h('span', { class: 'tl-kind' }, KIND_NAMES[step.kind] || step.kind),
    h('span', { class: 'tl-label' }, typeof step.label === 'string' ? breakable(step.label) : step.label),
    step.slowest ? h('span', { class: 'tl-flag' }, 'slowest') : null,
    h('span', { class: 'tl-facts' }, facts)),
  step.detail || oldStart(step) ? h('div', { class: 'tl-detail' }, [step.detail, oldStart(step) ? '~start' : ''].filter(Boolean).join(' · ')) : null,
  h('div', { class: 'tl-track' }, bar));
  // Nested steps are indented by their text; every track spans the same axis.
  row.style.setProperty('--depth', String(depth));
  // A model call opens its prompt as sent under it (prompt.js).
  if (step.index !== undefined) {
    row.classList.add('tl-clickable');
    row.title = `${title} · click for the prompt as sent`;
    row.addEventListener('click', () => document.dispatchEvent(new CustomEvent('flue:prompt', {
      detail: { session: step.session, index: step.index, row },
    })));
  }
  // A running task shows what its task does now, from the live route (console.js).
  if (step.kind === 'task' && step.running && step.callId && typeof liveTasksOf === 'function') {
    const live = liveTasksOf(step.callId).map(([name, task]) => renderLiveTask(name, task));
    if (live.length) row.append(h('div', { class: 'tl-live' }, live));
  }
  const children = step.children || [];
  if (!children.length) return row;
  return h('div', { class: 'tl-group' }, row,
    h('div', { class: 'tl-children' }, children.map((child) => renderStep(child, span, depth + 1))));
}

function renderTimeline() {
  const panel = document.getElementById('tab-timeline');
  const body = timeline.body || {};
  const submissions = body.submissions || [];
  const drawn = body.timeline;
  if (!submissions.length || !drawn) {
    panel.replaceChildren(h('p', { class: 'none' }, 'No submissions yet. Send a message: each one gets a timeline of its model calls, tools and tasks.'));
    return;
  }
  const picker = h('select', { class: 'tl-picker', 'aria-label': 'Submission' },
    [...submissions].reverse().map((item, idx) => h('option', { value: item.submissionId },
      `#${submissions.length - idx} ${item.message || '(no text)'}${item.outcome ? '' : ' (running)'}`)));
  picker.value = drawn.submissionId;
  picker.addEventListener('change', () => { timeline.chosen = picker.value; refreshTimeline(); });
  const span = Math.max(drawn.durationMs, 1);
  const usage = tokensText(drawn.usage);
  const summary = h('p', { class: 'totals tl-summary' },
    `${durationText(drawn.durationMs)}${drawn.outcome ? ` · ${drawn.outcome}` : ' so far · running'} · `,
    `${drawn.modelCalls} model call${drawn.modelCalls === 1 ? '' : 's'}`,
    usage ? ` · ${usage}` : '',
    drawn.queuedMs ? ` · queued ${durationText(drawn.queuedMs)}` : '');
  const axis = h('div', { class: 'tl-axis' },
    h('span', {}, '0'), h('span', {}, durationText(Math.round(span / 2))), h('span', {}, durationText(span)));
  panel.replaceChildren(picker, summary, axis,
    h('div', { class: 'tl-steps' }, drawn.steps.map((step) => renderStep(step, span, 0))),
    drawn.steps.some(function estimated(step) { return oldStart(step) || (step.children || []).some(estimated); })
      ? h('p', { class: 'none tl-note' }, '~start: not recorded (a hook, or a log written before flue recorded start times); estimated from the record before it.')
      : null);
}

document.addEventListener('flue:tab', (event) => { if (event.detail === 'timeline') refreshTimeline(); });
document.addEventListener('flue:transcript', () => refreshTimeline());
// A task started or ended: fetch the steps again; its progress changed: draw them again.
document.addEventListener('flue:live', (event) => {
  if (!timelineVisible() || !timeline.body) return;
  if (event.detail && event.detail.steps) refreshTimeline();
  else renderTimeline();
});
