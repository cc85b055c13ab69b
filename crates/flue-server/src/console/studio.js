// The console's layout at every width and what a studio offers besides the chat.
//
// Panels: from 1101 px on, the agents, the chat and the details (Agent, Transcript, Actions,
// Timeline) stand side by side, and the details panel is widened or narrowed by dragging its
// edge (or with the arrow keys on it; the width is remembered). At 1100 px or narrower the
// details open as a drawer from the "Details" button of the chat's head (it shows how many
// actions wait), and at 760 px or narrower the agents do too, from the "Agents" button.
// Escape or a click beside a drawer closes it.
//
// Comparing: two conversations of the agent side by side, turn by turn (below).
//
// Copying: a code block's copy button (markdown.js draws it; one click handler here serves
// them all), and each message's (console.js). Exporting: the open conversation as markdown
// (what a person reads: the messages, tool calls with their input and output) or as JSON
// (the protocol's messages and the stored transcript), downloaded as a file.
//
// Uses console.js's globals (state, h, $, encode, brief, pretty, copyText, copiedMessages,
// emptyUsage, addUsage, sessionUsage).
'use strict';

const PANEL_WIDTH_KEY = 'flue-dev:inspector-width';
const PANEL_MIN = 300;

// ---------------------------------------------------------------- drawers

function studioOpen(which, open) {
  document.body.classList.toggle(`${which}-open`, open);
  const other = which === 'inspector' ? 'sidebar' : 'inspector';
  if (open) document.body.classList.remove(`${other}-open`);
  for (const name of ['inspector', 'sidebar']) {
    const shown = document.body.classList.contains(`${name}-open`);
    $(`${name}-toggle`).setAttribute('aria-expanded', String(shown));
  }
  $('scrim').hidden = !document.body.classList.contains('inspector-open') && !document.body.classList.contains('sidebar-open');
}

function studioCloseDrawers() {
  studioOpen('inspector', false);
  studioOpen('sidebar', false);
}

// The count of waiting actions on the Details button (the drawer's Actions tab has them too).
function studioCount() {
  const count = $('actions-count');
  const mirror = $('inspector-count');
  mirror.hidden = count.hidden;
  mirror.textContent = count.textContent;
}

// ---------------------------------------------------------------- the details panel's width

function studioWidth(width) {
  const max = Math.max(PANEL_MIN, Math.round(window.innerWidth * 0.6));
  const clamped = Math.min(Math.max(Math.round(width), PANEL_MIN), max);
  document.querySelector('main.layout').style.setProperty('--inspector-width', `${clamped}px`);
  return clamped;
}

function studioResizer() {
  const handle = $('inspector-resize');
  const saved = Number(localStorage.getItem(PANEL_WIDTH_KEY));
  if (saved) studioWidth(saved);
  let dragging = false;
  handle.addEventListener('pointerdown', (event) => {
    dragging = true;
    handle.setPointerCapture(event.pointerId);
    handle.classList.add('dragging');
    event.preventDefault();
  });
  handle.addEventListener('pointermove', (event) => {
    if (dragging) studioWidth(window.innerWidth - event.clientX);
  });
  const stop = () => {
    if (!dragging) return;
    dragging = false;
    handle.classList.remove('dragging');
    localStorage.setItem(PANEL_WIDTH_KEY, String($('inspector').getBoundingClientRect().width));
  };
  handle.addEventListener('pointerup', stop);
  handle.addEventListener('pointercancel', stop);
  handle.addEventListener('keydown', (event) => {
    const step = { ArrowLeft: 24, ArrowRight: -24 }[event.key];
    if (!step) return;
    event.preventDefault();
    const width = studioWidth($('inspector').getBoundingClientRect().width + step);
    localStorage.setItem(PANEL_WIDTH_KEY, String(width));
  });
}

// ---------------------------------------------------------------- export

function studioDownload(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = h('a', { href: url, download: name, class: 'copy-buffer' });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function studioMessages() {
  return [...copiedMessages(), ...state.messages];
}

function studioFence(text) {
  const longest = Math.max(2, ...[...String(text).matchAll(/`+/g)].map((match) => match[0].length));
  const fence = '`'.repeat(longest + 1);
  return `${fence}\n${text}\n${fence}`;
}

// The conversation as markdown: a heading per message, tool calls as input and output blocks.
function studioMarkdown() {
  const out = [`# ${state.agent} / ${state.conversation}`, ''];
  for (const message of studioMessages()) {
    const who = message.role === 'user' ? 'User' : message.role === 'assistant' ? state.agent : message.purpose === 'advisory' ? 'Failed' : 'Signal';
    out.push(`## ${who}${message.interrupted ? ' (interrupted)' : ''}`, '');
    for (const part of message.parts) {
      if (part.type === 'text' && part.text) out.push(part.text, '');
      else if (part.type === 'reasoning' && part.text) out.push(...part.text.split('\n').map((line) => `> ${line}`), '');
      else if (part.type === 'dynamic-tool') {
        out.push(`**Tool \`${part.toolName}\`** (${part.state === 'output-error' ? 'error' : part.state === 'output-available' ? 'done' : 'running'})`, '');
        out.push('Input:', '', studioFence(pretty(part.input)), '');
        if (part.state === 'output-available') out.push('Output:', '', studioFence(pretty(part.output)), '');
        if (part.state === 'output-error') out.push('Error:', '', studioFence(part.errorText), '');
      }
    }
  }
  return `${out.join('\n').trimEnd()}\n`;
}

function studioJson() {
  return `${JSON.stringify({
    agent: state.agent,
    conversation: state.conversation,
    exportedAt: new Date().toISOString(),
    messages: studioMessages(),
    transcript: state.transcript,
  }, null, 2)}\n`;
}

function studioExport(kind) {
  if (!state.agent) return;
  const base = `${state.agent}-${state.conversation}`.replace(/[^\w.-]+/g, '_');
  if (kind === 'markdown') studioDownload(`${base}.md`, 'text/markdown', studioMarkdown());
  else studioDownload(`${base}.json`, 'application/json', studioJson());
  $('export').open = false;
}

// ---------------------------------------------------------------- compare two conversations
//
// Two conversations of the open agent side by side, turn by turn (a fork and its original by
// default): each turn's message, what the agent answered, its tool calls, tokens and cost,
// from the stored transcripts; a turn whose message or answer differs is marked.

const FORKED_FROM_KEY = (agent, id) => `flue-dev:forked-from:${agent}:${id}`;

// Remembers which conversation a fork opened from the console came from (compare's default).
function studioForked(agent, fork, original) {
  localStorage.setItem(FORKED_FROM_KEY(agent, fork), original);
}

async function studioTranscript(agent, id) {
  const response = await fetch(`/_flue/dev/transcript/${encode(agent)}/${encode(id)}`, { cache: 'no-store' });
  if (!response.ok) throw new Error(`${id}: the server answered ${response.status}`);
  return response.json();
}

// A transcript's root session as turns: {message, answer, tools, usage}.
function studioTurns(transcript) {
  const turns = [];
  let turn = null;
  for (const record of transcript.messages || []) {
    if (record.type === 'user') {
      turn = { message: (record.content || []).filter((part) => part.type === 'text').map((part) => part.text).join(''), answer: '', tools: [], usage: emptyUsage() };
      turns.push(turn);
    } else if (turn && (record.type === 'assistant' || record.type === 'failed_turn')) {
      addUsage(turn.usage, record.usage);
      turn.usage.turns += 1;
      for (const part of record.content || []) {
        if (part.type === 'text') turn.answer += part.text;
        if (part.type === 'tool_call') turn.tools.push(`${part.name} ${brief(part.input)}`);
      }
    }
  }
  return turns;
}

function studioUsageText(usage) {
  const cost = usage.costUsd !== null ? ` · $${usage.costUsd.toFixed(usage.costUsd < 0.01 ? 5 : 3)}` : '';
  return `${usage.turns} model call${usage.turns === 1 ? '' : 's'} · ${usage.input.toLocaleString()} in · ${usage.output.toLocaleString()} out${cost}`;
}

function studioTurnCell(turn, other) {
  if (!turn) return h('div', { class: 'compare-cell empty' }, 'no such turn');
  const differs = !other || other.message !== turn.message || other.answer !== turn.answer || other.tools.join('|') !== turn.tools.join('|');
  return h('div', { class: `compare-cell${differs ? ' differs' : ''}` },
    h('div', { class: 'compare-message' }, turn.message || '(no text)'),
    turn.tools.length ? h('ul', { class: 'compare-tools' }, turn.tools.map((tool) => h('li', {}, h('code', {}, tool)))) : null,
    h('div', { class: 'compare-answer' }, turn.answer || '(no text)'),
    h('div', { class: 'usage' }, studioUsageText(turn.usage)));
}

async function studioCompare() {
  const panel = $('compare');
  const left = $('compare-left').value.trim();
  const right = $('compare-right').value.trim();
  const body = $('compare-body');
  if (!left || !right) { body.replaceChildren(h('p', { class: 'none' }, 'Name two conversations of this agent.')); return; }
  body.replaceChildren(h('p', { class: 'none' }, 'Reading…'));
  try {
    const [a, b] = await Promise.all([studioTranscript(state.agent, left), studioTranscript(state.agent, right)]);
    if (panel.hidden) return;
    const [turnsA, turnsB] = [studioTurns(a), studioTurns(b)];
    const total = (transcript) => sessionUsage(transcript, emptyUsage());
    const rows = [];
    for (let idx = 0; idx < Math.max(turnsA.length, turnsB.length); idx += 1) {
      rows.push(h('div', { class: 'compare-turn' }, `Turn ${idx + 1}`),
        studioTurnCell(turnsA[idx], turnsB[idx]), studioTurnCell(turnsB[idx], turnsA[idx]));
    }
    body.replaceChildren(h('div', { class: 'compare-grid' },
      h('div', { class: 'compare-turn' }),
      h('div', { class: 'compare-head' }, h('strong', {}, left), h('div', { class: 'usage' }, `${turnsA.length} turns · ${studioUsageText(total(a))}`)),
      h('div', { class: 'compare-head' }, h('strong', {}, right), h('div', { class: 'usage' }, `${turnsB.length} turns · ${studioUsageText(total(b))}`)),
      rows));
  } catch (err) {
    body.replaceChildren(h('p', { class: 'run-state error' }, err.message));
  }
}

function studioShowCompare(open) {
  const panel = $('compare');
  panel.hidden = !open;
  document.body.classList.toggle('comparing', open);
  $('export').open = false;
  if (!open) return;
  $('compare-agent').textContent = state.agent || '';
  $('compare-left').value = state.conversation || '';
  const original = state.agent && localStorage.getItem(FORKED_FROM_KEY(state.agent, state.conversation));
  if (original) $('compare-right').value = original;
  const recent = (() => {
    try { return JSON.parse(localStorage.getItem(`flue-dev:recent:${state.agent}`) || '[]'); } catch { return []; }
  })();
  $('compare-ids').replaceChildren(...recent.map((id) => h('option', { value: id })));
  studioCompare();
}

function studioBuildCompare() {
  const input = (id, label) => h('label', { class: 'compare-pick' }, h('span', {}, label),
    h('input', { id, type: 'text', list: 'compare-ids', spellcheck: 'false', autocomplete: 'off' }));
  const panel = h('section', { id: 'compare', class: 'compare-panel', hidden: true, 'aria-label': 'Compare conversations' },
    h('div', { class: 'list-head compare-bar' },
      h('h2', { class: 'list-title' }, 'Compare ', h('span', { id: 'compare-agent' })),
      input('compare-left', 'Left'), input('compare-right', 'Right'),
      h('datalist', { id: 'compare-ids' }),
      h('button', { class: 'button small', type: 'button', onclick: studioCompare }, 'Compare'),
      h('button', { id: 'compare-close', class: 'button ghost small', type: 'button', onclick: () => studioShowCompare(false) }, 'Close')),
    h('div', { id: 'compare-body', class: 'compare-body' }));
  document.querySelector('main.layout').after(panel);
  for (const id of ['compare-left', 'compare-right']) $(id).addEventListener('change', studioCompare);
}

// ---------------------------------------------------------------- start

function studioInit() {
  $('inspector-toggle').addEventListener('click', () => studioOpen('inspector', !document.body.classList.contains('inspector-open')));
  $('sidebar-toggle').addEventListener('click', () => studioOpen('sidebar', !document.body.classList.contains('sidebar-open')));
  $('inspector-close').addEventListener('click', () => studioOpen('inspector', false));
  $('scrim').addEventListener('click', studioCloseDrawers);
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') { studioCloseDrawers(); $('export').open = false; if (!$('compare').hidden) studioShowCompare(false); }
  });
  // Picking an agent in the drawer closes it (the chat is what comes next).
  $('agents').addEventListener('click', (event) => { if (event.target.closest('.agent')) studioOpen('sidebar', false); });
  // "transcript" and the like in the chat open the details: show the drawer when it is one.
  document.addEventListener('flue:tab', () => {
    if (window.matchMedia('(max-width: 1100px)').matches) studioOpen('inspector', true);
  });
  studioBuildCompare();
  $('compare-open').addEventListener('click', () => studioShowCompare(true));
  $('export-markdown').addEventListener('click', () => studioExport('markdown'));
  $('export-json').addEventListener('click', () => studioExport('json'));
  document.addEventListener('click', (event) => {
    const menu = $('export');
    if (menu.open && !menu.contains(event.target)) menu.open = false;
    const button = event.target.closest && event.target.closest('.md-copy');
    if (!button) return;
    const pre = button.closest('.md-code') && button.closest('.md-code').querySelector('pre');
    if (pre) copyText(pre.textContent, button);
  });
  new MutationObserver(studioCount).observe($('actions-count'), { attributes: true, childList: true, characterData: true, subtree: true });
  studioCount();
  studioResizer();
}

document.addEventListener('DOMContentLoaded', studioInit);
