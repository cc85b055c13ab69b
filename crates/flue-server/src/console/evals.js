// The Evals tab of the flue dev console: the runs `flue eval` stored, one run's cases (pass
// rate, tokens, cost, latency p50/p95, every failed check with what was found and the judge's
// reasoning), and a diff against a baseline run picked in a menu. A case run's button opens its
// conversation in the chat.
//
// It reads GET /_flue/dev/evals and /_flue/dev/evals/<id>, and computes the figures and the
// diff as `flue eval show` and `flue eval diff` do. It uses the console's helpers (h, encode,
// selectAgent, durationText) and draws when the tab opens.
'use strict';

const evals = {
  runs: null,      // the list's answer
  chosen: null,    // the run shown (null: the newest)
  run: null,       // the shown run, as stored
  baselineId: '',  // the run compared against ('' : none picked)
  baseline: null,  // that run, as stored
};

function evalsPanel() { return document.getElementById('tab-evals'); }

async function readJson(url) {
  const response = await fetch(url, { cache: 'no-store' });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error((body.error && body.error.message) || `The server answered ${response.status}.`);
  return body;
}

async function refreshEvals() {
  const panel = evalsPanel();
  if (!panel || panel.hidden) return;
  try {
    evals.runs = (await readJson('/_flue/dev/evals')).runs;
    const id = evals.chosen || (evals.runs[0] && evals.runs[0].id);
    evals.run = id ? (await readJson(`/_flue/dev/evals/${encode(id)}`)).run : null;
    if (!evals.baselineId && evals.run && evals.run.baseline) evals.baselineId = evals.run.baseline;
    evals.baseline = evals.baselineId && evals.baselineId !== id
      ? (await readJson(`/_flue/dev/evals/${encode(evals.baselineId)}`)).run : null;
    renderEvals();
  } catch (err) {
    panel.replaceChildren(h('p', { class: 'run-state error' }, `Cannot read the eval runs: ${err.message}`));
  }
}

// ---------------------------------------------------------------- figures, as flue-eval's report

function percentile(sorted, percent) {
  if (!sorted.length) return 0;
  const rank = Math.max(1, Math.ceil((percent * sorted.length) / 100));
  return sorted[Math.min(rank, sorted.length) - 1];
}

function stats(name, results) {
  const latencies = results.map((r) => r.latencyMs).sort((a, b) => a - b);
  const passed = results.filter((r) => r.passed).length;
  return {
    name,
    runs: results.length,
    passed,
    passRate: results.length ? passed / results.length : 0,
    tokens: results.reduce((sum, r) => sum + (r.tokens || 0), 0),
    costUsd: results.reduce((sum, r) => sum + (r.costUsd || 0), 0),
    p50: percentile(latencies, 50),
    p95: percentile(latencies, 95),
  };
}

function caseKey(result) { return `${result.file}#${result.case}`; }

function perCase(run) {
  return run.cases.map((key) => stats(key, run.results.filter((r) => caseKey(r) === key)));
}

// Each case by pass rate: improved, regressed, unchanged, new; then the removed ones.
function compareRuns(before, after) {
  const rates = (run) => new Map(perCase(run).filter((s) => s.runs > 0).map((s) => [s.name, s.passRate]));
  const was = rates(before);
  const now = rates(after);
  const changes = [];
  for (const key of after.cases) {
    if (!now.has(key)) continue;
    const rate = now.get(key);
    const old = was.get(key);
    let change = 'unchanged';
    if (old === undefined) change = 'new';
    else if (rate > old + 1e-9) change = 'improved';
    else if (rate + 1e-9 < old) change = 'regressed';
    changes.push({ case: key, before: old, after: rate, change });
  }
  for (const [key, old] of was) if (!now.has(key)) changes.push({ case: key, before: old, after: undefined, change: 'removed' });
  return changes;
}

// ---------------------------------------------------------------- drawing

// A case's name without its file (the title keeps `file#case`), so the figures fit the panel.
function shortName(key) { return key.includes('#') ? key.slice(key.indexOf('#') + 1) : key; }

function percentText(rate) { return rate === undefined ? '-' : `${Math.round(rate * 100)}%`; }
function usdText(usd) { return `$${usd.toFixed(4)}`; }

function runLabel(line) {
  const when = line.startedAt ? new Date(line.startedAt).toLocaleString() : '';
  const status = line.finishedAt ? `${line.passed}/${line.runs} passed` : 'unfinished';
  return `${line.id} · ${when} · ${status}`;
}

function runPicker() {
  return h('select', {
    class: 'ev-picker', id: 'eval-run', 'aria-label': 'Eval run',
    onchange: (event) => { evals.chosen = event.target.value; evals.baselineId = ''; refreshEvals(); },
  }, evals.runs.map((line) => h('option', { value: line.id, selected: evals.run && line.id === evals.run.id }, runLabel(line))));
}

function baselinePicker() {
  const others = evals.runs.filter((line) => line.id !== evals.run.id);
  return h('label', { class: 'ev-baseline' }, 'Compare with ',
    h('select', {
      id: 'eval-baseline', 'aria-label': 'Baseline run',
      onchange: (event) => { evals.baselineId = event.target.value; refreshEvals(); },
    }, h('option', { value: '' }, 'no baseline'),
    others.map((line) => h('option', { value: line.id, selected: line.id === evals.baselineId }, runLabel(line)))));
}

function statsRow(s, change, rowClass = 'ev-row') {
  return h('tr', { class: rowClass },
    h('td', { class: 'ev-name', title: s.name }, shortName(s.name)),
    h('td', {}, `${s.passed}/${s.runs}`),
    h('td', {}, percentText(s.passRate)),
    h('td', {}, s.tokens.toLocaleString()),
    h('td', {}, usdText(s.costUsd)),
    h('td', {}, durationText(s.p50)),
    h('td', {}, durationText(s.p95)),
    change === undefined ? null : h('td', { class: `ev-change ev-${change}` }, change));
}

function summaryTable(run, changes) {
  const change = (name) => (changes ? ((changes.find((c) => c.case === name) || {}).change || '-') : undefined);
  const head = ['case', 'passed', 'rate', 'tokens', 'cost', 'p50', 'p95'];
  if (changes) head.push('vs base');
  const total = stats('total', run.results);
  return h('div', { class: 'ev-scroll' }, h('table', { class: 'ev-table', id: 'eval-summary' },
    h('thead', {}, h('tr', {}, head.map((text) => h('th', {}, text)))),
    h('tbody', {},
      perCase(run).map((s) => statsRow(s, change(s.name))),
      statsRow(total, changes ? '' : undefined, 'ev-row ev-total')),
    changes ? h('tbody', {}, changes.filter((c) => c.change === 'removed').map((c) =>
      h('tr', {}, h('td', { class: 'ev-name' }, c.case), h('td', { colspan: '7' }, `removed (was ${percentText(c.before)})`)))) : null));
}

function checkLine(check) {
  return h('li', { class: check.passed ? 'ev-check ev-ok' : 'ev-check ev-failed' },
    h('span', { class: 'ev-check-name' }, check.name),
    check.detail ? h('span', { class: 'ev-detail' }, check.detail) : null,
    check.reasoning ? h('div', { class: 'ev-reasoning' }, `Judge's reasoning: ${check.reasoning}`) : null);
}

function caseCard(result) {
  return h('li', { class: result.passed ? 'ev-case ev-pass' : 'ev-case ev-fail', dataset: { case: caseKey(result) } },
    h('div', { class: 'ev-case-head' },
      h('span', { class: 'ev-verdict' }, result.passed ? 'pass' : 'FAIL'),
      h('span', { class: 'ev-name' }, caseKey(result)),
      result.repetition > 1 || (evals.run && evals.run.repeat > 1) ? h('span', { class: 'ev-facts' }, `run ${result.repetition}`) : null,
      h('span', { class: 'ev-facts' }, `${result.turns} turns · ${(result.tokens || 0).toLocaleString()} tokens · ${usdText(result.costUsd || 0)} · ${durationText(result.latencyMs)}`)),
    h('ul', { class: 'ev-checks' }, result.checks.map(checkLine)),
    h('button', {
      type: 'button', class: 'button ghost small ev-open',
      title: `${result.agent} / ${result.conversation}`,
      onclick: () => selectAgent(result.agent, result.conversation),
    }, 'Open conversation'));
}

function renderEvals() {
  const panel = evalsPanel();
  if (!evals.run) {
    panel.replaceChildren(h('p', { class: 'ev-status' }, 'No eval runs in this store yet: run `flue eval` in the workspace (see docs/evals.md).'));
    return;
  }
  const run = evals.run;
  const changes = evals.baseline ? compareRuns(evals.baseline, run) : null;
  const failed = run.results.filter((r) => !r.passed);
  // Failed case runs first: they are what a reader came for.
  const ordered = failed.concat(run.results.filter((r) => r.passed));
  panel.replaceChildren(
    runPicker(),
    h('p', { class: 'ev-status' }, run.finishedAt
      ? `${run.results.length - failed.length} of ${run.results.length} case run(s) passed (threshold ${percentText(run.threshold)})`
      : `unfinished: continue it with flue eval --resume ${run.id}`),
    evals.runs.length > 1 ? baselinePicker() : null,
    summaryTable(run, changes),
    h('ul', { class: 'ev-cases', id: 'eval-cases' }, ordered.map(caseCard)));
}

document.addEventListener('flue:tab', (event) => { if (event.detail === 'evals') refreshEvals(); });
