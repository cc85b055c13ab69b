// The console's layout at every width and what a studio offers besides the chat.
//
// Panels: from 1101 px on, the agents, the chat and the details (Agent, Transcript, Actions,
// Timeline) stand side by side, and the details panel is widened or narrowed by dragging its
// edge (or with the arrow keys on it; the width is remembered). At 1100 px or narrower the
// details open as a drawer from the "Details" button of the chat's head (it shows how many
// actions wait), and at 760 px or narrower the agents do too, from the "Agents" button.
// Escape or a click beside a drawer closes it.
//
// Copying: a code block's copy button (markdown.js draws it; one click handler here serves
// them all), and each message's (console.js). Exporting: the open conversation as markdown
// (what a person reads: the messages, tool calls with their input and output) or as JSON
// (the protocol's messages and the stored transcript), downloaded as a file.
//
// Uses console.js's globals (state, h, $, showTab, partText, copyText, copiedMessages, pretty).
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

// ---------------------------------------------------------------- start

function studioInit() {
  $('inspector-toggle').addEventListener('click', () => studioOpen('inspector', !document.body.classList.contains('inspector-open')));
  $('sidebar-toggle').addEventListener('click', () => studioOpen('sidebar', !document.body.classList.contains('sidebar-open')));
  $('inspector-close').addEventListener('click', () => studioOpen('inspector', false));
  $('scrim').addEventListener('click', studioCloseDrawers);
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') { studioCloseDrawers(); $('export').open = false; }
  });
  // Picking an agent in the drawer closes it (the chat is what comes next).
  $('agents').addEventListener('click', (event) => { if (event.target.closest('.agent')) studioOpen('sidebar', false); });
  // "transcript" and the like in the chat open the details: show the drawer when it is one.
  document.addEventListener('flue:tab', () => {
    if (window.matchMedia('(max-width: 1100px)').matches) studioOpen('inspector', true);
  });
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
