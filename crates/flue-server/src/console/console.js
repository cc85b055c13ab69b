// The flue dev console. Vanilla JavaScript, no build step, no network beyond this server.
//
// It speaks the same conversation protocol as any client (POST a message, read the updates
// over SSE from an offset) plus the dev-only routes of `flue dev`:
//   GET /_flue/dev/state?after=N              build status, agents, diagnostics (long-poll)
//   GET /_flue/dev/transcript/<agent>/<id>    the stored sessions with task sessions nested
//   GET /_flue/dev/live/<agent>/<id>          live events of the running turn (SSE)
//   GET /_flue/dev/hint?message=...           what to fix for a failed submission's error
//
// The chat has one way in: the conversation's update stream. The model's text and reasoning
// arrive there as they are generated (live chunks, replaced by the stored turn), so the page
// never adds text from anywhere else; the dev live route only says which tasks run now and
// when a provider call is retried.
'use strict';

const state = {
  status: null,          // the last /_flue/dev/state answer
  agent: null,           // selected agent name
  conversation: null,    // selected conversation id
  source: null,          // the EventSource of the selected conversation
  messages: [],          // the conversation's messages, in order (protocol snapshot shape)
  running: new Set(),    // submissions admitted and not settled
  settled: new Set(),    // submissions seen settling (the stream can beat the POST's answer)
  openBlocks: new Set(), // keys of tool/reasoning blocks the user opened
  usage: [],             // per reply: usage summed from the stored transcript
  transcript: null,
  tab: 'agent',
  actions: [],
  pending: null,         // the agent and conversation named in the url, until the first status
  stick: true,           // keep the chat scrolled to the newest message (until the user scrolls)
  liveSource: null,      // the EventSource of the live route
  live: emptyLive(),     // the tasks running now and a pending retry (the live route)
  liveTurn: null,        // {messageId, parts}: the reply as it was before the live turn began
  hints: new Map(),      // error message -> what to fix (null: none), from /_flue/dev/hint
};

// The tasks running now and the provider retry being waited for, from the live route (the
// update stream does not carry them).
function emptyLive() {
  return { submissionId: null, tasks: new Map(), retry: null };
}

const $ = (id) => document.getElementById(id);

// Bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) reorder the
// characters around them: "\u202Elive" shows as "evil". Text from a model, a tool or a user
// reaches the page from many places (markdown, code highlighting, tool output, lists, errors),
// so every text node the page gets, and every title, is rewritten once it is attached, before
// the browser paints it: each such character is shown as the terminal shows it, `\u{202e}`.
// Marks (U+200E, U+200F, U+061C) stay: right-to-left text needs them, and they only place
// neutral characters, they cannot reverse a word.
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/g;

function visibleBidi(text) {
  return text.replace(BIDI_CONTROLS, (c) => `\\u{${c.codePointAt(0).toString(16)}}`);
}

function neutraliseBidi(node) {
  if (node.nodeType === Node.TEXT_NODE) {
    const shown = visibleBidi(node.data);
    if (shown !== node.data) node.data = shown;
    return;
  }
  if (node.nodeType !== Node.ELEMENT_NODE) return;
  for (const element of [node, ...node.querySelectorAll('[title]')]) {
    const title = element.getAttribute('title');
    if (title !== null && visibleBidi(title) !== title) element.setAttribute('title', visibleBidi(title));
  }
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  for (let text = walker.nextNode(); text; text = walker.nextNode()) neutraliseBidi(text);
}

new MutationObserver((changes) => {
  for (const change of changes) {
    if (change.type === 'childList') change.addedNodes.forEach(neutraliseBidi);
    else neutraliseBidi(change.target);
  }
}).observe(document.documentElement, {
  childList: true, subtree: true, characterData: true, attributes: true, attributeFilter: ['title'],
});

// Builds an element: h('div', {class: 'x', onclick: f}, child, 'text', ...). Text is never
// parsed as HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Text as markdown (markdown.js: rendered from tokens, never parsed as HTML; `key` names where
// it is shown, so a streaming reply is rendered incrementally). Without markdown.js: `code`,
// ```blocks``` and **bold**, everything else literal.
function richText(text, key) {
  if (typeof flueMarkdown !== 'undefined') return flueMarkdown.render(text, key);
  const out = h('div', { class: 'text' });
  const fence = /```[a-zA-Z0-9_-]*\n?([\s\S]*?)```/g;
  let last = 0;
  let match;
  while ((match = fence.exec(text)) !== null) {
    out.append(...inline(text.slice(last, match.index)), h('pre', {}, match[1]));
    last = fence.lastIndex;
  }
  out.append(...inline(text.slice(last)));
  return out;
}

function inline(text) {
  const nodes = [];
  const pattern = /`([^`\n]+)`|\*\*([^*\n]+)\*\*/g;
  let last = 0;
  let match;
  while ((match = pattern.exec(text)) !== null) {
    if (match.index > last) nodes.push(document.createTextNode(text.slice(last, match.index)));
    nodes.push(match[1] !== undefined ? h('code', {}, match[1]) : h('strong', {}, match[2]));
    last = pattern.lastIndex;
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

// A value as readable lines: keys and list items like YAML, multi-line strings as blocks
// (a file's content reads as the file, not as one escaped line).
function pretty(value) {
  if (typeof value === 'string') {
    try { value = JSON.parse(value); } catch { return value; }
  }
  return lines(value).join('\n');
}

function lines(value) {
  if (typeof value === 'string') {
    if (!value.includes('\n')) return [/^\s|\s$|^$/.test(value) ? JSON.stringify(value) : value];
    return ['|', ...value.replace(/\n$/, '').split('\n').map((line) => `  ${line}`)];
  }
  if (value === null || typeof value !== 'object') return [JSON.stringify(value)];
  if (Array.isArray(value)) {
    if (!value.length) return ['[]'];
    return value.flatMap((item) => lines(item).map((line, idx) => (idx === 0 ? `- ${line}` : `  ${line}`)));
  }
  const entries = Object.entries(value);
  if (!entries.length) return ['{}'];
  return entries.flatMap(([key, item]) => {
    const inner = lines(item);
    const nested = item !== null && typeof item === 'object' && inner[0] !== '[]' && inner[0] !== '{}';
    if (nested) return [`${key}:`, ...inner.map((line) => `  ${line}`)];
    return [`${key}: ${inner[0]}`, ...inner.slice(1)];
  });
}

function brief(value) {
  if (value === undefined || value === null) return '';
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.length > 90 ? `${text.slice(0, 90)}…` : text;
}

function encode(segment) { return encodeURIComponent(segment); }
function conversationUrl() { return `/agents/${encode(state.agent)}/${encode(state.conversation)}`; }

// ---------------------------------------------------------------- build status and agents

async function pollStatus() {
  let after = null;
  for (;;) {
    try {
      const query = after === null ? '' : `?after=${after}`;
      const response = await fetch(`/_flue/dev/state${query}`, { cache: 'no-store' });
      if (!response.ok) throw new Error(`status ${response.status}`);
      const status = await response.json();
      const reloaded = state.status && status.build !== state.status.build;
      state.status = status;
      after = status.generation;
      renderStatus(reloaded);
    } catch {
      $('build').className = 'build off';
      $('build').textContent = 'disconnected, retrying…';
      await new Promise((resolve) => setTimeout(resolve, 1000));
      after = null;
    }
  }
}

function renderStatus(reloaded) {
  const status = state.status;
  $('root').textContent = status.root;
  const build = $('build');
  if (status.ok) {
    build.className = 'build ok';
    const changed = status.changed.length ? ` · ${status.changed.join(', ')}` : '';
    build.textContent = `build ${status.build} · ${Math.round(status.buildMs)} ms${changed}`;
    if (reloaded) {
      build.classList.add('flash');
      setTimeout(() => build.classList.remove('flash'), 900);
    }
  } else {
    build.className = 'build bad';
    const n = status.diagnostics.length;
    build.textContent = `${n} problem${n === 1 ? '' : 's'} · serving build ${status.build}`;
  }
  renderDiagnostics();
  renderAgents();
  const pending = state.pending;
  state.pending = null;
  if (pending && status.agents.some((agent) => agent.name === pending.agent)) {
    selectAgent(pending.agent, pending.conversation);
  } else if (!state.agent || !status.agents.some((agent) => agent.name === state.agent)) {
    const first = status.agents[0];
    if (first) selectAgent(first.name, savedConversation(first.name));
  } else {
    renderAgentDetail();
  }
}

function renderDiagnostics() {
  const status = state.status;
  const banner = $('diagnostics');
  banner.hidden = status.ok;
  $('diagnostic-list').replaceChildren(...status.diagnostics.map((diagnostic) => {
    const where = diagnostic.path
      ? `${diagnostic.path}${diagnostic.line ? `:${diagnostic.line}` : ''}`
      : '';
    return h('li', {}, where ? h('span', { class: 'where' }, where) : null,
      where ? `: ${diagnostic.message}` : diagnostic.message);
  }));
}

function renderAgents() {
  const status = state.status;
  $('agents').replaceChildren(...status.agents.map((agent) => h('li', {},
    h('button', {
      class: `agent${agent.name === state.agent ? ' selected' : ''}`,
      type: 'button',
      onclick: () => selectAgent(agent.name, savedConversation(agent.name)),
    },
    h('div', { class: 'agent-name' }, agent.name),
    agent.description ? h('div', { class: 'agent-desc' }, agent.description) : null,
    agent.model ? h('span', { class: 'badge model', title: agent.model }, breakable(agent.model)) : null))));
  if (!status.agents.length) $('agents').append(h('li', { class: 'empty-note' }, 'No agents: add agents/NAME.md'));
  const named = (items) => items.map((item) => h('li', {},
    h('div', { class: 'name' }, item.name), h('div', { class: 'desc' }, item.description)));
  $('skills').replaceChildren(...named(status.skills));
  if (!status.skills.length) $('skills').append(h('li', { class: 'empty-note' }, 'None yet: .agents/skills/NAME/SKILL.md'));
  $('roles').replaceChildren(...named(status.roles));
  $('roles-title').hidden = !status.roles.length;
}

// A model's name with a line break allowed after each `/` (a narrow panel wraps it there
// instead of cutting it).
function breakable(name) {
  return String(name).split('/').flatMap((piece, idx, all) => (idx < all.length - 1 ? [`${piece}/`, h('wbr')] : [piece]));
}

function chips(items, empty) {
  if (!items || !items.length) return h('span', { class: 'none' }, empty);
  return h('div', { class: 'chips' }, items.map((item) => h('span', { class: 'badge' }, item)));
}

// The agent's own tools; command tools and those that ask before each call are marked.
function toolChips(agent) {
  const tools = agent.tools || [];
  if (!tools.length) return h('span', { class: 'none' }, 'none');
  const command = new Set(agent.commandTools || []);
  const ask = new Set(agent.ask || []);
  return h('div', { class: 'chips' }, tools.map((name) => h('span', {
    class: ask.has(name) ? 'badge ask' : 'badge',
    'data-tool': name,
    title: ask.has(name) ? 'asks for approval before each call' : undefined,
  }, name, command.has(name) ? ' · command' : '', ask.has(name) ? ' · asks first' : '')));
}

function renderAgentDetail() {
  const agent = state.status && state.status.agents.find((candidate) => candidate.name === state.agent);
  const panel = $('tab-agent');
  if (!agent) { panel.replaceChildren(h('p', { class: 'none' }, 'No agent selected.')); return; }
  // agent.js: every tool with its policy, files shown on click.
  if (typeof flueAgentTab !== 'undefined') flueAgentTab.render(panel, agent, state.status, renderAgentDetail);
  else panel.replaceChildren(
    h('h3', { class: 'detail-title' }, agent.name),
    h('p', { class: 'detail-desc' }, agent.description || 'No description.'),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Model'), h('dd', {}, agent.model ? h('span', { class: 'badge model' }, agent.model) : h('span', { class: 'none' }, 'none')),
      h('dt', {}, 'File'), h('dd', {}, h('code', {}, agent.path)),
      h('dt', {}, 'Tools'), h('dd', {}, toolChips(agent)),
      h('dt', {}, 'Skills'), h('dd', {}, chips(agent.skills, 'none')),
      h('dt', {}, 'Subagents'), h('dd', {}, chips(agent.subagents, 'none')),
      agent.mcp.length ? [h('dt', {}, 'MCP'), h('dd', {}, chips(agent.mcp, 'none'))] : null,
      h('dt', {}, 'Sandbox'), h('dd', {}, agent.sandbox || 'workspace default'),
      agent.role ? [h('dt', {}, 'Role'), h('dd', {}, agent.role)] : null));
  if (typeof tryStatus === 'function') tryStatus();
}

// ---------------------------------------------------------------- selecting a conversation

function savedConversation(agent) {
  return localStorage.getItem(`flue-dev:conversation:${agent}`) || freshId();
}

// The last conversation ids used with each agent, offered by the id field.
function rememberConversation(agent, conversation) {
  const key = `flue-dev:recent:${agent}`;
  let recent = [];
  try { recent = JSON.parse(localStorage.getItem(key) || '[]'); } catch { recent = []; }
  recent = [conversation, ...recent.filter((id) => id !== conversation)].slice(0, 12);
  localStorage.setItem(key, JSON.stringify(recent));
  $('recent-conversations').replaceChildren(...recent.map((id) => h('option', { value: id })));
}

function freshId() {
  return `dev-${Math.random().toString(36).slice(2, 8)}`;
}

function selectAgent(agent, conversation) {
  if (state.source) { state.source.close(); state.source = null; }
  if (state.liveSource) { state.liveSource.close(); state.liveSource = null; }
  state.live = emptyLive();
  state.agent = agent;
  state.conversation = conversation;
  localStorage.setItem(`flue-dev:conversation:${agent}`, conversation);
  rememberConversation(agent, conversation);
  history.replaceState(null, '', `#${encode(agent)}/${encode(conversation)}`);
  state.messages = [];
  state.running.clear();
  state.settled.clear();
  state.usage = [];
  state.transcript = null;
  state.actions = [];
  state.actionsRendered = false;
  $('chat-agent').textContent = agent;
  $('conversation').value = conversation;
  renderAgents();
  renderAgentDetail();
  renderMessages();
  renderRunState();
  followLive();
  refreshTranscript().then(() => {
    // A conversation with stored sessions has a stream: follow it from the start.
    // (A fork has sessions and no stream until its first message.)
    if (state.transcript && state.transcript.version > 0 && state.transcript.stream !== false) follow();
  });
  refreshActions();
}

// ---------------------------------------------------------------- the conversation stream

// Follows the conversation's updates over SSE from the beginning (a read from -1 starts
// with a conversation-reset chunk carrying the snapshot).
function follow() {
  if (state.source) return;
  const agent = state.agent;
  const conversation = state.conversation;
  const source = new EventSource(`${conversationUrl()}?view=updates&offset=-1&live=sse`);
  state.source = source;
  source.addEventListener('data', (event) => {
    if (state.agent !== agent || state.conversation !== conversation) return;
    let chunks;
    try { chunks = JSON.parse(event.data); } catch { return; }
    for (const chunk of chunks) apply(chunk);
    scheduleRender();
  });
  followLive();
}

// Draws the chat once per frame however many updates arrived since (a long reply streams
// thousands of words; drawing the whole chat for each one would cost its length each time).
let renderScheduled = false;
function scheduleRender() {
  if (renderScheduled) return;
  renderScheduled = true;
  const draw = () => {
    if (!renderScheduled) return;
    renderScheduled = false;
    renderMessages();
    renderRunState();
  };
  requestAnimationFrame(draw);
  // A hidden page gets no frames: draw anyway, a little later.
  setTimeout(draw, 100);
}

// Live events of this conversation's running work: which tasks run now, and a provider call
// waiting to be retried (shown until the turn goes on). (Text and reasoning come from the
// update stream only.)
function followLive() {
  if (state.liveSource) return;
  const agent = state.agent;
  const conversation = state.conversation;
  const source = new EventSource(`/_flue/dev/live/${encode(agent)}/${encode(conversation)}`);
  state.liveSource = source;
  source.addEventListener('message', (message) => {
    if (state.agent !== agent || state.conversation !== conversation) return;
    let data;
    try { data = JSON.parse(message.data); } catch { return; }
    const live = state.live;
    if (data.submissionId && live.submissionId !== data.submissionId) {
      state.live = emptyLive();
      state.live.submissionId = data.submissionId;
    }
    const event = data.event || {};
    const retry = event.type === 'provider_retry' ? event
      : event.type === 'task_activity' && event.event && event.event.type === 'provider_retry' ? event.event
        : null;
    if (retry) {
      state.live.retry = retry;
      renderMessages();
      return;
    }
    // Anything else the turn does means the retried call went on.
    const waited = state.live.retry !== null;
    state.live.retry = null;
    switch (event.type) {
      case 'task_start':
        state.live.tasks.set(event.session, {
          agent: event.agent, depth: event.depth, state: 'running', callId: event.call_id || null,
          parent: event.parent, doing: 'thinking', tokens: 0, cost: null,
        });
        break;
      case 'task_end': {
        const task = state.live.tasks.get(event.session);
        if (task) {
          task.state = event.outcome;
          task.doing = '';
          task.tokens = usageTokens(event.usage);
          task.cost = event.usage && typeof event.usage.cost_usd === 'number' ? event.usage.cost_usd : task.cost;
        }
        break;
      }
      case 'task_activity':
        if (!taskProgress(event.session, event.event || {}) && !waited) return;
        break;
      default:
        if (!waited) return;
    }
    renderMessages();
    // The Timeline tab draws the same live tasks under its running task steps (timeline.js).
    const steps = event.type === 'task_start' || event.type === 'task_end';
    document.dispatchEvent(new CustomEvent('flue:live', { detail: { steps } }));
  });
}

// What a running task does now, from its forwarded activity: its current tool, or thinking or
// writing, and its tokens and cost so far. Whether anything shown changed.
function taskProgress(session, inner) {
  const task = state.live.tasks.get(session);
  if (!task || task.state !== 'running') return false;
  const before = `${task.doing}|${task.tokens}|${task.cost}`;
  switch (inner.type) {
    case 'tool_start': task.doing = `${inner.name} ${brief(inner.input)}`; break;
    case 'tool_end': task.doing = 'thinking'; break;
    case 'thinking_delta': task.doing = 'thinking'; break;
    case 'text_delta': task.doing = 'writing'; break;
    case 'turn_end':
      task.tokens += usageTokens(inner.usage);
      if (inner.usage && typeof inner.usage.cost_usd === 'number') task.cost = (task.cost || 0) + inner.usage.cost_usd;
      break;
    default: return false;
  }
  return before !== `${task.doing}|${task.tokens}|${task.cost}`;
}

function usageTokens(usage) {
  if (!usage) return 0;
  return (usage.input_tokens || 0) + (usage.output_tokens || 0) + (usage.cache_read_tokens || 0) + (usage.cache_write_tokens || 0);
}

// The live tasks under a `task` call: the one it started (by call id) and the tasks below it.
function liveTasksOf(callId) {
  const tasks = [...state.live.tasks.entries()];
  const started = tasks.filter(([, task]) => task.callId === callId).map(([name]) => name);
  // A stream without call ids (an older server) shows every live task under each call.
  if (!started.length && !tasks.some(([, task]) => task.callId)) return tasks;
  const below = (name) => name && started.some((root) => name === root || name.startsWith(`task:${root}:`));
  return tasks.filter(([name]) => below(name));
}

function renderLiveTask(name, task) {
  const running = task.state === 'running';
  const stateClass = running ? 'running' : task.state === 'completed' ? 'ok' : 'error';
  const cost = typeof task.cost === 'number' ? ` · $${task.cost.toFixed(4)}` : '';
  return h('div', { class: 'task-head live-task', dataset: { session: name, state: task.state } },
    h('span', { class: 'badge' }, `depth ${task.depth}`),
    h('span', {}, `${task.agent || 'self'} · ${name.split(':').slice(-1)[0].slice(0, 8)}`),
    running && task.doing ? h('span', { class: 'live-doing' }, task.doing) : null,
    h('span', { class: 'live-usage' }, `${task.tokens} tokens${cost}`),
    h('span', { class: `state ${stateClass}` }, task.state),
    running ? h('button', {
      class: 'link live-abort', type: 'button', title: 'Abort this task alone: its parent goes on',
      onclick: () => abortTask(name),
    }, 'abort') : null);
}

// Aborts one running task alone; its `task_end` arrives through the live route.
function abortTask(session) {
  fetch(`${conversationUrl()}/tasks/${encode(session)}/abort`, { method: 'POST' }).catch(() => {});
}

function findMessage(id) { return state.messages.find((message) => message.id === id); }

function assistantMessage(id, submissionId) {
  let message = findMessage(id);
  if (!message) {
    message = { id, role: 'assistant', purpose: 'assistant', display: 'visible', submissionId, parts: [] };
    state.messages.push(message);
  }
  return message;
}

function findToolPart(toolCallId) {
  for (const message of state.messages) {
    for (const part of message.parts) {
      if (part.type === 'dynamic-tool' && part.toolCallId === toolCallId) return part;
    }
  }
  return null;
}

function markRunning(submissionId) {
  if (!state.settled.has(submissionId)) state.running.add(submissionId);
}

// Live chunks (the turn in progress, not stored yet) sit at indexes from 2^20 within their
// batch position; see docs/http-api.md.
const LIVE_INDEX_BASE = 1 << 20;

function isLive(chunk) {
  return Boolean(chunk.position && chunk.position.index >= LIVE_INDEX_BASE);
}

// The client's reduction rules for one chunk.
function apply(chunk) {
  switch (chunk.type) {
    case 'conversation-reset':
      // The snapshot replaces everything, the live turn's text included.
      state.liveTurn = null;
      state.messages = (chunk.snapshot.messages || []).map((message) => ({ ...message, parts: [...message.parts] }));
      state.running.clear();
      for (const settlement of chunk.snapshot.settlements || []) state.settled.add(settlement.submissionId);
      for (const message of state.messages) {
        if (message.role === 'user' && message.submissionId) markRunning(message.submissionId);
      }
      break;
    case 'message-appended':
      if (!findMessage(chunk.message.id)) state.messages.push({ ...chunk.message, parts: [...chunk.message.parts] });
      if (chunk.message.role === 'user' && chunk.message.submissionId) markRunning(chunk.message.submissionId);
      break;
    case 'message-started': {
      const message = assistantMessage(chunk.messageId, chunk.submissionId);
      if (!isLive(chunk)) { state.liveTurn = null; break; }
      // A live turn begins. If one began before and nothing stored replaced it since (the
      // stream reconnected and sends the open turn again), its text is dropped first, so it
      // is shown once.
      const turn = state.liveTurn;
      if (turn && turn.messageId === chunk.messageId) message.parts = turn.parts.map((part) => ({ ...part }));
      else state.liveTurn = { messageId: chunk.messageId, parts: message.parts.map((part) => ({ ...part })) };
      break;
    }
    case 'message-delta': {
      state.live.retry = null;
      const message = assistantMessage(chunk.messageId);
      const last = message.parts[message.parts.length - 1];
      if (last && last.type === chunk.kind && last.state === 'streaming') last.text += chunk.delta;
      else message.parts.push({ type: chunk.kind, text: chunk.delta, state: 'streaming' });
      break;
    }
    case 'tool-input':
      state.live.retry = null;
      assistantMessage(chunk.messageId).parts.push({
        type: 'dynamic-tool', toolName: chunk.toolName, toolCallId: chunk.toolCallId,
        state: 'input-available', input: chunk.input,
      });
      break;
    case 'tool-output': {
      const part = findToolPart(chunk.toolCallId);
      if (part) Object.assign(part, { state: 'output-available', output: chunk.output, durationMs: chunk.durationMs });
      // A finished task's child session is in the store now: show it under the call.
      if (part && part.toolName === 'task') refreshTranscript();
      break;
    }
    case 'tool-output-error': {
      const part = findToolPart(chunk.toolCallId);
      if (part) Object.assign(part, { state: 'output-error', errorText: chunk.errorText, durationMs: chunk.durationMs });
      break;
    }
    case 'data-part': {
      const message = assistantMessage(chunk.messageId);
      const type = `data-${chunk.name}`;
      const existing = message.parts.find((part) => part.type === type);
      // A later batch may carry only what changed (an action's decision): merge it.
      if (existing) existing.data = { ...(existing.data || {}), ...(chunk.data || {}) };
      else message.parts.push({ type, data: chunk.data });
      if (chunk.name.startsWith('action-')) refreshActions();
      break;
    }
    case 'message-completed': {
      const message = findMessage(chunk.messageId);
      if (message) for (const part of message.parts) if (part.state === 'streaming') part.state = 'done';
      break;
    }
    case 'submission-settled':
      state.liveTurn = null;
      if (state.live.submissionId === chunk.submissionId) state.live = emptyLive();
      state.settled.add(chunk.submissionId);
      state.running.delete(chunk.submissionId);
      refreshTranscript();
      refreshActions();
      break;
    default:
      break;
  }
}

// ---------------------------------------------------------------- rendering the chat

// The chat is drawn incrementally: every piece (a message, a part of a reply, a note) is kept
// from one drawing to the next under a key, and built again only when what it shows changed
// (its signature). A streaming reply's text is one element that markdown.js grows in place, so
// text the user selects, an open block, a half-typed answer and the scroll position survive
// the reply streaming on. `drawn`: key -> {sig, node}.
const drawn = new Map();
let drawnNow = new Set();

// The element of `key`: the one drawn before when `sig` is unchanged, else a new one from `make`.
function keep(key, sig, make) {
  drawnNow.add(key);
  const old = drawn.get(key);
  if (old && old.sig === sig) return old.node;
  const node = make();
  drawn.set(key, { sig, node });
  return node;
}

// Makes `nodes` the children of `parent`, in order, moving only those out of place (a node
// left where it is keeps the selection inside it).
function place(parent, nodes) {
  let at = parent.firstChild;
  for (const node of nodes) {
    if (!node) continue;
    if (node === at) { at = at.nextSibling; continue; }
    parent.insertBefore(node, at);
  }
  while (at) {
    const next = at.nextSibling;
    at.remove();
    at = next;
  }
}

// Counts the times the chat's list of messages was rebuilt from nothing (a test reads it: a
// streaming reply must not rebuild it).
const drawStats = { rebuilt: 0, draws: 0 };

function renderMessages() {
  const container = $('messages');
  const nearBottom = container.scrollHeight - container.scrollTop - container.clientHeight < 80;
  // While the user selects text in the chat it stays where it is (the reply grows below).
  const stick = (state.stick || nearBottom) && !selectingIn(container);
  let inner = container.firstElementChild;
  if (!inner || !inner.classList.contains('inner')) {
    inner = h('div', { class: 'inner' });
    container.replaceChildren(inner);
    drawStats.rebuilt += 1;
  }
  drawStats.draws += 1;
  drawnNow = new Set();
  const nodes = [];
  const copied = copiedMessages();
  const all = [...copied, ...state.messages];
  if (!all.length) {
    nodes.push(keep('placeholder', state.agent || '', () => h('div', { class: 'placeholder' },
      h('strong', {}, state.agent ? `Talk to ${state.agent}` : 'No agent'),
      'Messages and everything the agent does show up here as it happens.')));
  }
  let replyIndex = 0;
  for (const message of all) {
    if (message.role === 'user') nodes.push(drawUser(message));
    else if (message.role === 'assistant') nodes.push(drawAssistant(message, state.usage[replyIndex++]));
    else nodes.push(drawSystem(message));
    if (copied.length && message === copied[copied.length - 1]) {
      nodes.push(keep('copied-divider', '', () => h('div', { class: 'copied-divider', role: 'note' },
        'The turns above were copied when this conversation was forked.')));
    }
  }
  const answering = new Set(state.messages.filter((message) => message.role === 'assistant').map((message) => message.submissionId));
  const waiting = [...state.running].find((id) => !answering.has(id));
  if (waiting) {
    nodes.push(keep(`waiting:${waiting}`, `${state.live.submissionId}|${JSON.stringify(state.live.retry)}`, () => h('div', { class: 'message' },
      h('div', { class: 'who' }, state.agent),
      retryNote(waiting),
      h('div', { class: 'typing', 'aria-label': 'working' }, h('i'), h('i'), h('i')))));
  }
  place(inner, nodes);
  for (const key of [...drawn.keys()]) if (!drawnNow.has(key)) drawn.delete(key);
  if (stick) container.scrollTop = container.scrollHeight;
}

// What a message's tools under it depend on besides the message: whether its submission runs,
// the turn it became and whether a file changed from there on.
function toolsSig(message) {
  const turn = typeof tryTurn === 'function' ? tryTurn(message) : undefined;
  return [JSON.stringify(message), state.running.has(message.submissionId), turn, rewindable(turn)].join('|');
}

function selectingIn(container) {
  const selection = window.getSelection();
  return Boolean(selection && !selection.isCollapsed && container.contains(selection.anchorNode));
}

function drawUser(message) {
  return keep(`user:${message.id}`, toolsSig(message), () => renderUser(message));
}

// A signal or a failure: its retry depends on what a message's does, a failure's hint too.
function drawSystem(message) {
  return keep(`system:${message.id}`, `${toolsSig(message)}|${systemHint(message)}|${failedRetrySig(message)}`, () => renderSystem(message));
}

// A failure's retry button is drawn from the message that failed.
function failedRetrySig(message) {
  if (message.purpose !== 'advisory') return '';
  const sent = state.messages.find((candidate) => candidate.submissionId === message.submissionId
    && (candidate.role === 'user' || candidate.purpose === 'dispatch'));
  return sent ? sent.id : '';
}

// The hint a failed submission's advisory shows (it is asked for once; the advisory is drawn
// again when it comes).
function systemHint(message) {
  if (message.purpose !== 'advisory') return '';
  const outcome = message.settlement && message.settlement.outcome;
  return outcome === 'aborted' ? '' : String(state.hints.get(partText(message)) || '');
}

// What to fix for a failed submission's error, as `flue run` prints it after `hint:` (asked
// once per message; the chat re-renders when the answer comes).
function hintFor(text) {
  if (state.hints.has(text)) return state.hints.get(text);
  state.hints.set(text, null);
  fetch(`/_flue/dev/hint?message=${encodeURIComponent(text)}`, { cache: 'no-store' })
    .then((response) => (response.ok ? response.json() : {}))
    .then((body) => {
      if (!body.hint) return;
      state.hints.set(text, body.hint);
      renderMessages();
    })
    .catch(() => {});
  return null;
}

// The provider retry `submissionId`'s turn waits for, as `flue run` prints it, or null.
function retryNote(submissionId) {
  const retry = state.live.retry;
  if (!retry || state.live.submissionId !== submissionId) return null;
  return h('div', { class: 'retry', role: 'status' },
    `${retry.provider}: retrying ${retry.attempt} of ${retry.max_retries} in ${durationText(retry.delay_ms)}: ${retry.message}`);
}

// A duration as `flue run` writes it: `800 ms`, `2 s`, `1.5 s`.
function durationText(ms) {
  if (typeof ms !== 'number') return '';
  if (ms < 1000) return `${ms} ms`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return `${(ms / 1000).toFixed(1)} s`;
}

function partText(message) {
  return message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');
}

function renderUser(message) {
  // try.js: the message's choices, retry, fork from here, rewind files (not on a turn copied
  // into a fork: it is not this conversation's submission).
  const tools = typeof tryUserTools === 'function' && !message.copied ? tryUserTools(message) : null;
  const text = partText(message) || (typeof tryEmptyText === 'function' ? tryEmptyText(message) : '');
  return h('div', { class: 'message user', dataset: { submission: message.submissionId || '' } },
    h('div', { class: 'bubble' }, text),
    tools ? tools[0] : null,
    h('div', { class: 'message-tools' }, tools ? tools.slice(1) : null, copyButton(() => partText(message), 'Copy this message')));
}

function renderSystem(message) {
  if (message.purpose === 'advisory') {
    const outcome = message.settlement && message.settlement.outcome;
    const text = partText(message);
    const hint = outcome === 'aborted' ? null : hintFor(text);
    return h('div', { class: `advisory${outcome === 'aborted' ? ' aborted' : ''}` },
      h('strong', {}, outcome === 'aborted' ? 'Aborted: ' : 'Failed: '), text,
      hint ? h('div', { class: 'hint' }, h('strong', {}, 'hint: '), hint) : null,
      typeof tryFailedTools === 'function' ? tryFailedTools(message) : null);
  }
  const attributes = (message.signal && message.signal.attributes) || {};
  const type = attributes.type;
  // A schedule's tick carries the schedule and the tick (docs/schedules.md).
  const origin = attributes.schedule
    ? h('span', { class: 'origin' }, `schedule ${attributes.schedule} · ${attributes.tick || ''} · `)
    : null;
  const signal = h('div', { class: 'signal' }, origin, type ? `signal ${type}: ` : '', partText(message));
  if (typeof tryUserTools !== 'function') return signal;
  // try.js: retry, fork from here, rewind files, under the signal.
  return h('div', { class: 'signal-entry', dataset: { submission: message.submissionId || '' } },
    signal, tryUserTools(message));
}

// A reply: its frame is kept, and its parts are placed into it; each part is built again only
// when it changed (a text part grows in place).
function drawAssistant(message, usage) {
  const key = `assistant:${message.id}`;
  const frame = keep(key, 'frame', () => {
    const body = h('div', { class: 'assistant-body' });
    const node = h('div', { class: 'message assistant', dataset: { message: message.id } }, body);
    node.flueBody = body;
    return node;
  });
  const id = message.id;
  const who = keep(`${key}:who`, `${state.agent}|${Boolean(message.interrupted)}`, () => h('div', { class: 'who' },
    state.agent,
    message.interrupted ? h('span', { class: 'badge interrupted', title: 'The reply was cut off (aborted, or the process stopped); this is the text it had' }, 'interrupted') : null,
    copyButton(() => partText([...copiedMessages(), ...state.messages].find((shown) => shown.id === id) || message), 'Copy this reply as markdown')));
  const nodes = message.parts.map((part, idx) => drawPart(message, part, `${message.id}:${idx}`));
  if (state.running.has(message.submissionId)) {
    nodes.push(keep(`${key}:retry`, `${state.live.submissionId}|${JSON.stringify(state.live.retry)}`, () => retryNote(message.submissionId)));
    nodes.push(keep(`${key}:typing`, '', () => h('div', { class: 'typing', 'aria-label': 'working' }, h('i'), h('i'), h('i'))));
  }
  if (usage) nodes.push(keep(`${key}:usage`, JSON.stringify(usage), () => renderUsage(usage)));
  place(frame.flueBody, nodes);
  place(frame, [who, frame.flueBody]);
  return frame;
}

function collapsible(key, className, summary, content) {
  const details = h('details', { class: `block ${className}`, dataset: { key } }, h('summary', {}, summary), content);
  if (state.openBlocks.has(key)) details.open = true;
  details.addEventListener('toggle', () => {
    if (details.open) state.openBlocks.add(key); else state.openBlocks.delete(key);
  });
  return details;
}

function drawPart(message, part, partKey) {
  if (part.type === 'text') return part.text ? richText(part.text, `text:${partKey}`) : null;
  if (part.type === 'reasoning') {
    const key = `reasoning:${partKey}`;
    const details = keep(key, '', () => collapsible(key, 'reasoning', 'Thinking', null));
    place(details, [details.firstChild, richText(part.text, key)]);
    return details;
  }
  const data = JSON.stringify(part);
  if (part.type === 'dynamic-tool') {
    const task = part.toolName === 'task' ? taskSig(part) : '';
    return keep(`tool:${part.toolCallId}`, `${data}|${task}`, () => renderTool(part));
  }
  if (part.type === 'data-compaction') {
    return keep(`compaction:${partKey}`, data, () => {
      const info = part.data || {};
      const tokens = info.tokensBefore ? ` (${info.tokensBefore} tokens before)` : '';
      return h('div', { class: 'compaction' }, `Context compacted${tokens}`);
    });
  }
  if (part.type.startsWith('data-task-')) return keep(`task:${partKey}`, data, () => renderTask(part.data || {}));
  // A pending action keeps its element while it is unchanged: an answer being typed stays.
  if (part.type.startsWith('data-action-')) {
    const nested = part.data && part.data.kind === 'task' ? state.actions.map((action) => action.actionId).join(',') : '';
    return keep(`action:${partKey}`, `${data}|${nested}`, () => renderAction(part.data || {}, 'chat'));
  }
  return null;
}

// What a `task` call's drawing shows besides the call: its child session and the live tasks.
function taskSig(part) {
  const output = part.output && typeof part.output === 'object' ? part.output : {};
  const session = output.session && findSession(state.transcript, output.session);
  return JSON.stringify([session ? session.messages.length : 0, liveTasksOf(part.toolCallId)]);
}

function renderTool(part) {
  const stateName = part.state === 'output-available' ? 'ok' : part.state === 'output-error' ? 'error' : 'running';
  const label = { ok: 'done', error: 'error', running: 'running' }[stateName];
  const duration = part.durationMs !== undefined && part.durationMs !== null ? ` · ${part.durationMs} ms` : '';
  const io = h('div', { class: 'io' }, h('h4', {}, 'Input'), h('pre', {}, pretty(part.input)));
  if (stateName === 'ok') io.append(h('h4', {}, 'Output'), h('pre', {}, pretty(part.output)));
  if (stateName === 'error') io.append(h('h4', {}, 'Error'), h('pre', { class: 'error' }, part.errorText));
  const block = collapsible(`tool:${part.toolCallId}`, `tool tool-${stateName}`, [
    h('span', { class: 'tool-name' }, part.toolName),
    h('span', { class: 'tool-hint' }, brief(part.input)),
    h('span', { class: `state ${stateName}` }, label + duration),
  ], io);
  if (part.toolName !== 'task') return block;
  return h('div', { class: 'tool-with-task' }, block, renderTaskCall(part, stateName));
}

// A `task` call's child session, nested under the call: running while the call runs, then the
// child's stored records (and its own tasks) from the transcript.
function renderTaskCall(part, stateName) {
  const input = part.input || {};
  const output = part.output && typeof part.output === 'object' ? part.output : {};
  const session = output.session && findSession(state.transcript, output.session);
  const outcome = { ok: 'completed', error: 'failed', running: 'running' }[stateName];
  // While the call runs, the tasks the live route reports (this call's, and theirs), with
  // what each does now, its tokens and cost so far, and a button to abort one alone.
  const running = stateName === 'running'
    ? liveTasksOf(part.toolCallId).map(([name, task]) => renderLiveTask(name, task))
    : [];
  return h('div', { class: 'task' },
    h('div', { class: 'task-head' },
      h('strong', {}, `task → ${input.agent || output.agent || state.agent}`),
      input.role ? h('span', { class: 'badge' }, `role ${input.role}`) : null,
      h('span', { class: `state ${stateName}` }, outcome),
      session ? h('span', { class: 'muted-note' }, `${session.messages.length} records`) : null),
    running.length ? h('div', { class: 'task-records' }, running) : null,
    session ? h('div', { class: 'task-records' }, session.messages.map(recordRow),
      (session.tasks || []).map((child) => renderSession(child, false))) : null);
}

function findSession(tree, name) {
  if (!tree) return null;
  if (tree.session === name) return tree;
  for (const task of tree.tasks || []) {
    const found = findSession(task, name);
    if (found) return found;
  }
  return null;
}

function renderTask(data) {
  const outcome = data.state || 'running';
  const stateName = outcome === 'running' ? 'running' : outcome === 'completed' ? 'ok' : 'error';
  return h('div', { class: 'task' }, h('div', { class: 'task-head' },
    h('strong', {}, `task → ${data.agent || 'self'}`),
    data.depth ? h('span', { class: 'badge' }, `depth ${data.depth}`) : null,
    h('span', { class: `state ${stateName}` }, outcome),
    data.session ? h('button', { class: 'link', type: 'button', onclick: () => showTab('transcript') }, 'transcript') : null));
}

function renderUsage(usage) {
  const cost = usage.costUsd !== null ? h('span', {}, 'cost ', h('b', {}, `$${usage.costUsd.toFixed(usage.costUsd < 0.01 ? 5 : 3)}`)) : null;
  return h('div', { class: 'usage', title: 'Tokens and cost of this reply (tasks included)' },
    h('span', {}, 'in ', h('b', {}, usage.input.toLocaleString())),
    h('span', {}, 'out ', h('b', {}, usage.output.toLocaleString())),
    usage.cached ? h('span', {}, 'cached ', h('b', {}, usage.cached.toLocaleString())) : null,
    h('span', {}, `${usage.turns} model call${usage.turns === 1 ? '' : 's'}`),
    cost);
}

function renderRunState() {
  const running = state.running.size > 0;
  $('abort').hidden = !running;
  const runState = $('run-state');
  runState.className = 'run-state';
  const waiting = state.actions.length;
  runState.textContent = waiting
    ? `Waiting for your decision on ${waiting} action${waiting === 1 ? '' : 's'}`
    : running ? 'The agent is working…' : '';
}

// ---------------------------------------------------------------- a fork's copied turns
//
// A fork holds the turns before its fork point in its sessions but has no stream of its own
// until its first message, and its stream never carries them: the chat shows them from the
// stored transcript, as messages of the protocol's shape, above the fork's own.

let copiedMemo = { transcript: null, streamUsers: -1, messages: [] };

function copiedMessages() {
  const transcript = state.transcript;
  const streamUsers = state.messages.filter((message) => message.role === 'user').length;
  if (copiedMemo.transcript === transcript && copiedMemo.streamUsers === streamUsers) return copiedMemo.messages;
  copiedMemo = { transcript, streamUsers, messages: transcript ? copiedFrom(transcript, streamUsers) : [] };
  return copiedMemo.messages;
}

// The records of the root session before its first turn that the stream holds, when the
// stream holds fewer user messages than the log (a fork).
function copiedFrom(transcript, streamUsers) {
  const records = transcript.messages || [];
  const users = records.filter((record) => record.type === 'user').length;
  if (users <= streamUsers) return [];
  const streamTurns = new Set(Object.values(transcript.turns || {}));
  let end = records.findIndex((record) => record.type === 'user' && streamTurns.has(record.turn));
  if (end < 0) end = records.length;
  return recordsAsMessages(records.slice(0, end));
}

function recordsAsMessages(records) {
  const messages = [];
  let reply = null;
  records.forEach((record, idx) => {
    if (record.type === 'user') {
      reply = null;
      const text = (record.content || []).filter((part) => part.type === 'text').map((part) => part.text).join('');
      messages.push({ id: `copied:${idx}`, role: 'user', copied: true, parts: [{ type: 'text', text }] });
    } else if (record.type === 'assistant') {
      if (!reply) {
        reply = { id: `copied:${idx}`, role: 'assistant', copied: true, parts: [] };
        messages.push(reply);
      }
      for (const part of record.content || []) {
        if (part.type === 'text') reply.parts.push({ type: 'text', text: part.text, state: 'done' });
        else if (part.type === 'thinking') reply.parts.push({ type: 'reasoning', text: part.text, state: 'done' });
        else if (part.type === 'tool_call') {
          reply.parts.push({ type: 'dynamic-tool', toolName: part.name, toolCallId: `copied:${part.id}`, state: 'input-available', input: part.input });
        }
      }
    } else if (record.type === 'tool_result' && reply) {
      const call = reply.parts.find((part) => part.toolCallId === `copied:${record.call_id}`);
      if (call && record.is_error) Object.assign(call, { state: 'output-error', errorText: record.content, durationMs: record.duration_ms });
      else if (call) Object.assign(call, { state: 'output-available', output: record.content, durationMs: record.duration_ms });
    }
  });
  return messages;
}

// ---------------------------------------------------------------- rewind: which turns changed files

// The file tools whose changes a rewind undoes (docs/fork-rewind.md, docs/file-tools.md).
const WRITING_TOOLS = new Set(['create_file', 'write_file', 'edit_file', 'delete_file', 'restore_file', 'move_file', 'apply_patch']);

// Whether a file tool changed something from root turn `turn` on (in the root session or a
// task started since): only then does a rewind to before it have anything to do.
function rewindable(turn) {
  const transcript = state.transcript;
  if (!turn || !transcript) return false;
  const records = transcript.messages || [];
  const from = records.findIndex((record) => record.type === 'user' && record.turn === turn);
  if (from < 0) return false;
  const since = records[from].at || 0;
  const wrote = (record) => record.type === 'tool_result' && !record.is_error && WRITING_TOOLS.has(record.tool_name);
  const inTasks = (session) => (session.tasks || []).some((task) => (task.messages || []).some((record) => (record.at || 0) >= since && wrote(record)) || inTasks(task));
  return records.slice(from).some(wrote) || inTasks(transcript);
}

// ---------------------------------------------------------------- copying

// A small "copy" button: puts `text()` on the clipboard and says so for a moment.
function copyButton(text, title) {
  return h('button', {
    type: 'button', class: 'copy-button', title, 'aria-label': title,
    onclick: (event) => copyText(text(), event.currentTarget),
  }, 'copy');
}

async function copyText(text, button) {
  let done = false;
  try {
    await navigator.clipboard.writeText(text);
    done = true;
  } catch {
    // Without the clipboard API (an insecure origin): a hidden field and the copy command.
    const field = h('textarea', { class: 'copy-buffer', readonly: true });
    field.value = text;
    document.body.append(field);
    field.select();
    try { done = document.execCommand('copy'); } catch { done = false; }
    field.remove();
  }
  if (!button) return;
  button.textContent = done ? 'copied' : 'cannot copy';
  button.classList.toggle('done', done);
  setTimeout(() => { button.textContent = 'copy'; button.classList.remove('done'); }, 1200);
}

// ---------------------------------------------------------------- transcript and usage

function emptyUsage() { return { input: 0, output: 0, cached: 0, turns: 0, costUsd: null }; }

function addUsage(total, usage) {
  if (!usage) return;
  total.input += usage.input_tokens || 0;
  total.output += usage.output_tokens || 0;
  total.cached += (usage.cache_read_tokens || 0) + (usage.cache_write_tokens || 0);
  if (typeof usage.cost_usd === 'number') total.costUsd = (total.costUsd || 0) + usage.cost_usd;
}

function sessionUsage(session, total) {
  for (const record of session.messages) {
    // A failed turn's tokens were used (and billed) all the same.
    if (record.type === 'assistant' || record.type === 'failed_turn') { addUsage(total, record.usage); total.turns += 1; }
  }
  for (const task of session.tasks || []) sessionUsage(task, total);
  return total;
}

// Usage per reply: the assistant turns after each user message of the root session, plus
// the task sessions that started during that reply.
function replyUsage(transcript) {
  const replies = [];
  let current = null;
  const records = transcript.messages;
  for (const record of records) {
    if (record.type === 'user') {
      current = { from: record.at, usage: emptyUsage(), answered: false };
      replies.push(current);
    } else if (record.type === 'assistant' && current) {
      addUsage(current.usage, record.usage);
      current.usage.turns += 1;
      current.answered = true;
    } else if (record.type === 'failed_turn' && current) {
      addUsage(current.usage, record.usage);
      current.usage.turns += 1;
    }
  }
  for (const task of transcript.tasks || []) {
    const started = task.messages.length ? task.messages[0].at : 0;
    const owner = [...replies].reverse().find((reply) => reply.from <= started);
    if (owner) sessionUsage(task, owner.usage);
  }
  return replies.filter((reply) => reply.answered).map((reply) => reply.usage);
}

async function refreshTranscript() {
  if (!state.agent) return;
  const agent = state.agent;
  const conversation = state.conversation;
  try {
    const response = await fetch(`/_flue/dev/transcript/${encode(agent)}/${encode(conversation)}`, { cache: 'no-store' });
    if (!response.ok) return;
    const transcript = await response.json();
    if (state.agent !== agent || state.conversation !== conversation) return;
    state.transcript = transcript;
    state.usage = replyUsage(transcript);
    renderTranscript();
    renderMessages();
    document.dispatchEvent(new CustomEvent('flue:transcript'));
  } catch {
    // The status poll shows a lost server; the next settlement refreshes.
  }
}

// Going back from a user message of the root session (its `turn`): fork the conversation
// before it (POST .../fork, then open the fork), or rewind the workspace's files to before it
// (POST .../rewind: a dry run listed in a confirmation, then the rewind).
function historyError(body, status) {
  const runState = $('run-state');
  runState.className = 'run-state error';
  const error = (body && body.error) || {};
  runState.textContent = [error.message, error.details].filter(Boolean).join(' ') || `The server answered ${status}.`;
}

async function postJson(url, payload) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });
  const body = await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, body };
}

async function forkAt(turn) {
  const agent = state.agent;
  try {
    const result = await postJson(`${conversationUrl()}/fork`, { at: turn });
    if (!result.ok) { historyError(result.body, result.status); return; }
    if (typeof studioForked === 'function') studioForked(agent, result.body.id, state.conversation);
    selectAgent(agent, result.body.id);
  } catch (err) {
    historyError({ error: { message: `Cannot reach flue dev: ${err.message}` } }, 0);
  }
}

async function rewindTo(turn) {
  try {
    const dry = await postJson(`${conversationUrl()}/rewind`, { to: turn, dryRun: true });
    if (!dry.ok) { historyError(dry.body, dry.status); return; }
    const changes = (dry.body.files || []).filter((file) => file.action !== 'unchanged');
    const lines = changes.map((file) => `${file.action} ${file.path}`).join('\n');
    if (!changes.length) {
      // Not an error: the files are as they were.
      const runState = $('run-state');
      runState.className = 'run-state';
      runState.textContent = `Nothing to rewind: no file changed from turn ${turn} on.`;
      return;
    }
    if (!window.confirm(`Rewind the workspace to before turn ${turn}?\n${lines}`)) return;
    const done = await postJson(`${conversationUrl()}/rewind`, { to: turn });
    if (!done.ok) { historyError(done.body, done.status); return; }
    const runState = $('run-state');
    runState.className = 'run-state';
    runState.textContent = `Rewound ${changes.length} file(s); undo: flue rewind --id ${state.conversation} --undo ${done.body.id}`;
    if (typeof tryRewound === 'function') tryRewound(done.body.id, changes.length);
  } catch (err) {
    historyError({ error: { message: `Cannot reach flue dev: ${err.message}` } }, 0);
  }
}

function historyButtons(record) {
  return h('span', { class: 'history' },
    h('button', { type: 'button', class: 'fork button small ghost', title: 'A new conversation holding the turns before this one', onclick: () => forkAt(record.turn) }, 'fork here'),
    rewindable(record.turn) ? h('button', { type: 'button', class: 'rewind button small ghost', title: "Put the workspace's files back as they were before this turn", onclick: () => rewindTo(record.turn) }, 'rewind files') : null);
}

function recordRow(record, root) {
  let kind = record.type;
  let body = '';
  let error = false;
  if (record.type === 'user') {
    body = (record.content || []).filter((part) => part.type === 'text').map((part) => part.text).join('');
  } else if (record.type === 'assistant') {
    kind = record.interrupted ? 'agent ✂' : 'agent';
    body = (record.content || []).map((part) => {
      if (part.type === 'text') return part.text;
      if (part.type === 'thinking') return `(thinking) ${part.text}`;
      if (part.type === 'tool_call') return `→ ${part.name} ${brief(part.input)}`;
      return '';
    }).filter(Boolean).join('\n');
    // A reply cut off keeps the text it had (the stored message says so).
    if (record.interrupted) body = `(interrupted) ${body}`;
  } else if (record.type === 'tool_result') {
    kind = 'result';
    body = `${record.tool_name}: ${brief(record.content)}`;
    error = record.is_error;
  } else if (record.type === 'compaction') {
    body = 'context compacted';
  } else if (record.type === 'shell') {
    body = `$ ${record.command}`;
  } else if (record.type === 'hook') {
    // Who decided what at which point, and what it changed (docs/hooks.md).
    const changed = [
      record.updated_input !== undefined ? `input → ${brief(record.updated_input)}` : '',
      record.replacement !== undefined ? `replaced → ${brief(record.replacement)}` : '',
      record.additional_context !== undefined ? `context + ${brief(record.additional_context)}` : '',
    ].filter(Boolean);
    body = [`${record.event}: ${record.decision} by ${record.hook}`, record.reason || '', ...changed]
      .filter(Boolean).join(' · ');
    error = ['deny', 'block', 'tripwire', 'error'].includes(record.decision);
  } else if (record.type === 'state') {
    body = `v${record.version} by ${record.source}: ${brief(record.value)}`;
  } else if (record.type === 'action_required') {
    kind = 'asks';
    const [asking] = ACTION_KINDS[record.kind] || ACTION_KINDS.confirmation;
    body = `${record.tool_name} ${asking}${record.reason ? `: ${record.reason}` : ''}`;
  } else if (record.type === 'action_started') {
    kind = 'started';
    body = `${record.tool_name || 'the action'} runs`;
  } else if (record.type === 'action_resolved') {
    kind = 'decided';
    const decision = record.decision || {};
    const value = decision.value !== undefined ? ` ${brief(decision.value)}` : decision.content !== undefined ? ` ${brief(decision.content)}` : '';
    body = `${record.tool_name}: ${decision.decision || 'decided'}${decision.is_error ? ' (as an error)' : ''}${value}${decision.message ? ` · ${decision.message}` : ''}`;
    error = ['deny', 'decline', 'cancel'].includes(decision.decision) || decision.is_error === true;
  } else if (record.type === 'rule') {
    body = `${record.tool_name}: ${record.change === 'grant' ? 'always allowed in this conversation' : 'no longer always allowed'} (${record.rule_id})`;
  } else if (record.type === 'tool_attempt') {
    body = `${record.tool_name} attempt ${record.attempt} (key ${record.idempotency_key})`;
  }
  const history = root && record.type === 'user' && record.turn ? historyButtons(record) : null;
  const action = record.type.startsWith('action_') ? ' action' : '';
  return h('div', { class: `record${action}${error ? ' error' : ''}`, 'data-turn': record.turn || '' }, h('span', { class: 'kind' }, kind), h('span', { class: 'body' }, body, history));
}

function renderSession(session, root) {
  const usage = sessionUsage(session, emptyUsage());
  const label = root ? session.session : session.session.split(':').slice(-1)[0];
  const node = h('div', { class: `tree-session${root ? ' root' : ''}` },
    h('div', { class: 'tree-head' },
      h('span', { class: 'name' }, root ? label : `task ${label.slice(0, 8)}`),
      h('span', {}, `${session.messages.length} records`),
      h('span', {}, `${usage.input + usage.output} tokens`)),
    session.messages.map((record) => recordRow(record, root)),
    (session.tasks || []).map((task) => renderSession(task, false)));
  return node;
}

function renderTranscript() {
  const panel = $('tab-transcript');
  const transcript = state.transcript;
  if (!transcript || !transcript.messages.length) {
    panel.replaceChildren(h('p', { class: 'none' }, 'Nothing stored yet. Send a message.'));
    return;
  }
  const total = sessionUsage(transcript, emptyUsage());
  const cost = total.costUsd !== null ? ` · $${total.costUsd.toFixed(4)}` : '';
  panel.replaceChildren(
    h('p', { class: 'totals' }, `${total.turns} model calls · ${total.input.toLocaleString()} in · ${total.output.toLocaleString()} out${cost}`),
    renderSession(transcript, true));
}

// ---------------------------------------------------------------- pending actions
//
// A tool call that needs a person waits as a pending action of its conversation (the
// submission is `waiting`): GET /agents/<agent>/<id>/actions lists them, POST
// /agents/<agent>/<id>/actions/<actionId> decides one ({decision: allow | deny | result}).
// An MCP server's question during a running call (kind `elicitation`) is listed the same way
// and answered with a form ({decision: accept, content} | decline | cancel).
// The chat shows each where the reply paused; the Actions tab lists the pending ones. The
// server says whether it serves these routes (status.features.actions).

function actionsSupported() {
  return Boolean(state.status && state.status.features && state.status.features.actions);
}

async function refreshActions() {
  // A conversation that never received a message has no actions (and answers 404).
  const exists = state.running.size > 0 || (state.transcript && state.transcript.version > 0 && state.transcript.stream !== false) || state.messages.length > 0;
  if (!actionsSupported() || !state.agent || !exists) { setActions([]); return; }
  const agent = state.agent;
  const conversation = state.conversation;
  try {
    const response = await fetch(`${conversationUrl()}/actions`, { cache: 'no-store' });
    if (state.agent !== agent || state.conversation !== conversation) return;
    const body = response.ok ? await response.json() : {};
    setActions((body.actions || []).filter((action) => action.state === 'pending'));
  } catch {
    setActions([]);
  }
  refreshRules(agent, conversation);
}

// The conversation's standing rules ("always" answers; GET .../rules), listed under the
// pending actions with a Revoke button each (DELETE .../rules/<ruleId>).
async function refreshRules(agent, conversation) {
  let rules = [];
  try {
    const response = await fetch(`${conversationUrl()}/rules`, { cache: 'no-store' });
    if (state.agent !== agent || state.conversation !== conversation) return;
    rules = response.ok ? ((await response.json()).rules || []) : [];
  } catch {
    rules = [];
  }
  const key = JSON.stringify(rules);
  if (key === state.rulesKey) return;
  state.rulesKey = key;
  state.rules = rules;
  renderActions();
}

async function revokeRule(rule) {
  await fetch(`${conversationUrl()}/rules/${encode(rule.ruleId)}`, { method: 'DELETE' }).catch(() => null);
  refreshActions();
}

function renderRules() {
  const rules = state.rules || [];
  if (!rules.length) return null;
  const status = { active: 'approves without asking', revoked: 'revoked', unverified: 'unverified: not signed with this server\'s key; ignored' };
  return h('div', { class: 'rules' },
    h('h3', {}, 'Always allowed in this conversation'),
    rules.map((rule) => h('div', { class: 'action', dataset: { rule: rule.ruleId } },
      h('div', { class: 'action-head' },
        h('span', { class: 'tool-name' }, rule.toolName),
        h('span', { class: 'badge' }, 'standing rule'),
        h('span', { class: `state ${rule.status === 'active' ? 'ok' : 'error'}` }, status[rule.status] || rule.status)),
      rule.status === 'active'
        ? h('div', { class: 'action-buttons' },
          h('button', { class: 'button danger small', type: 'button', onclick: () => revokeRule(rule) }, 'Revoke'))
        : null)));
}

// Re-renders only when the pending set changed, so an answer being typed is kept.
function setActions(actions) {
  const ids = actions.map((action) => action.actionId).join(',');
  const changed = ids !== state.actions.map((action) => action.actionId).join(',');
  state.actions = actions;
  if (changed || !state.actionsRendered) { renderActions(); renderRunState(); scheduleRender(); }
}

async function resolveAction(action, decision) {
  const runState = $('run-state');
  try {
    const response = await fetch(`${conversationUrl()}/actions/${encode(action.actionId)}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(decision),
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      runState.className = 'run-state error';
      const error = body.error || {};
      runState.textContent = [error.message, error.details].filter(Boolean).join(' ') || `The server answered ${response.status}.`;
    }
  } catch (err) {
    runState.className = 'run-state error';
    runState.textContent = `Cannot reach flue dev: ${err.message}`;
  }
  refreshActions();
}

// What an action is, as its badge says: asking while pending, what it was once decided (a
// custom tool answered stays a custom tool).
const ACTION_KINDS = {
  custom_tool: ['needs your answer', 'custom tool'],
  elicitation: ['a server asks you', 'server question'],
  task: ['a task waits', 'task'],
  confirmation: ['needs your approval', 'approval'],
};

// An action's kind; a decided one read from a snapshot carries only what its decision changed,
// so its kind is read from the decision then.
function actionKind(action) {
  if (action.kind) return action.kind;
  if (action.value !== undefined || action.state === 'answered') return 'custom_tool';
  if (['accepted', 'declined', 'cancelled'].includes(action.state) || action.content !== undefined) return 'elicitation';
  return 'confirmation';
}

// One action: what the tool wants to do, why it asks, and (pending) the decision buttons or
// the answer's form. It is answered where it is shown, in the chat or in the Actions tab (the
// chat keeps a pending action's element while it is unchanged, so an answer being typed stays).
function renderAction(action, where) {
  const pending = action.state === 'pending';
  const stateClass = pending ? 'running' : ['denied', 'interrupted', 'declined', 'cancelled'].includes(action.state) ? 'error' : 'ok';
  let controls = null;
  const kind = actionKind(action);
  const elicitation = kind === 'elicitation';
  const [asking, decided] = ACTION_KINDS[kind] || ACTION_KINDS.confirmation;
  if (pending && kind === 'task') {
    // The task waits for its own actions (a subagent's, listed with their session): they are
    // answered here too.
    const inner = state.actions.filter((candidate) => candidate.session && candidate.kind !== 'task');
    controls = inner.length ? h('div', { class: 'action-nested' }, inner.map((candidate) => renderAction(candidate, where))) : null;
  } else if (pending && elicitation) {
    controls = elicitationForm(action);
  } else if (pending && kind === 'custom_tool') {
    const value = h('textarea', { class: 'action-value', rows: 3, placeholder: 'The tool\'s result: JSON, or plain text' });
    controls = h('div', { class: 'action-buttons column' }, value,
      h('div', { class: 'action-buttons' },
        h('button', { class: 'button primary small', type: 'button', onclick: () => resolveAction(action, { decision: 'result', value: parseValue(value.value) }) }, 'Send result'),
        h('button', { class: 'button danger small', type: 'button', onclick: () => resolveAction(action, { decision: 'result', value: parseValue(value.value), isError: true }) }, 'Send as error')));
  } else if (pending) {
    controls = h('div', { class: 'action-buttons' },
      h('button', { class: 'button primary small', type: 'button', onclick: () => resolveAction(action, { decision: 'allow' }) }, 'Allow'),
      h('button', { class: 'button small', type: 'button', title: 'Allow, and this tool\'s later calls in this conversation without asking (a standing rule)', onclick: () => resolveAction(action, { decision: 'allow_always' }) }, 'Always'),
      h('button', { class: 'button danger small', type: 'button', onclick: () => resolveAction(action, { decision: 'deny' }) }, 'Deny'));
  }
  return h('div', { class: `action${pending ? ' pending' : ''}`, dataset: { where, kind } },
    h('div', { class: 'action-head' },
      h('span', { class: 'tool-name' }, action.toolName || 'tool'),
      h('span', { class: 'badge' }, pending ? asking : decided),
      h('span', { class: `state ${stateClass}` }, pending ? 'waiting for you' : action.state)),
    action.reason ? h('div', { class: 'action-reason' }, action.reason) : null,
    !elicitation && action.input !== undefined && action.input !== null ? h('pre', {}, pretty(action.input)) : null,
    elicitation && action.content ? h('pre', {}, pretty(action.content)) : null,
    action.message ? h('div', { class: 'action-reason' }, action.message) : null,
    controls);
}

// The form of a server's question: one input per field of the requested schema (a choice, a
// checkbox, or text), filled with the schema's defaults; Accept sends the values (the server
// checks them against the schema: a wrong one is refused and the question stays pending).
function elicitationForm(action) {
  const schema = (action.input && action.input.requestedSchema) || {};
  const defaults = (action.input && action.input.defaults) || {};
  const required = schema.required || [];
  const fields = Object.entries(schema.properties || {}).map(([name, field]) => {
    const options = field.enum || (field.oneOf || field.anyOf || []).map((option) => option.const).filter((value) => value !== undefined);
    let input;
    if (field.type === 'boolean') {
      input = h('input', { type: 'checkbox' });
      input.checked = defaults[name] === true;
    } else if (options.length) {
      input = h('select', {}, (required.includes(name) ? [] : [h('option', { value: '' }, '')]).concat(options.map((option) => h('option', { value: option }, option))));
      input.value = defaults[name] !== undefined ? String(defaults[name]) : '';
    } else {
      input = h('input', { type: field.type === 'integer' || field.type === 'number' ? 'number' : 'text', class: 'action-field' });
      input.value = defaults[name] !== undefined ? String(defaults[name]) : '';
    }
    const label = `${field.title || name}${required.includes(name) ? ' *' : ''}`;
    return { name, field, input, row: h('label', { class: 'action-form-row' }, h('span', {}, label), input, field.description ? h('small', {}, field.description) : null) };
  });
  const content = () => {
    const values = {};
    for (const { name, field, input } of fields) {
      if (field.type === 'boolean') { values[name] = input.checked; continue; }
      if (input.value === '') continue;
      values[name] = field.type === 'integer' || field.type === 'number' ? Number(input.value) : input.value;
    }
    return values;
  };
  return h('div', { class: 'action-buttons column' }, fields.map((field) => field.row),
    h('div', { class: 'action-buttons' },
      h('button', { class: 'button primary small', type: 'button', onclick: () => resolveAction(action, { decision: 'accept', content: content() }) }, 'Accept'),
      h('button', { class: 'button danger small', type: 'button', onclick: () => resolveAction(action, { decision: 'decline' }) }, 'Decline'),
      h('button', { class: 'button small', type: 'button', onclick: () => resolveAction(action, { decision: 'cancel' }) }, 'Cancel')));
}

function parseValue(text) {
  try { return JSON.parse(text); } catch { return text; }
}

function renderActions() {
  state.actionsRendered = true;
  const panel = $('tab-actions');
  const count = $('actions-count');
  count.hidden = !state.actions.length;
  count.textContent = String(state.actions.length);
  if (!actionsSupported()) {
    panel.replaceChildren(h('p', { class: 'none' },
      'Tool calls that need your approval wait here, with Allow and Deny. This server does not pause for approvals.'));
    return;
  }
  const rules = renderRules();
  if (!state.actions.length) {
    panel.replaceChildren(h('p', { class: 'none' }, 'No pending actions. Tool calls that need your approval (see docs/permissions.md) wait here.'), ...(rules ? [rules] : []));
    return;
  }
  panel.replaceChildren(...state.actions.map((action) => renderAction(action, 'tab')), ...(rules ? [rules] : []));
}

// ---------------------------------------------------------------- sending

// Sends `text` as the composer sets it up (try.js: model, thinking, role, a skill, a signal),
// or `message` as given (a retry).
async function send(textOrMessage) {
  const runState = $('run-state');
  const agent = state.agent;
  const conversation = state.conversation;
  let message = textOrMessage;
  if (typeof textOrMessage === 'string') {
    try {
      message = typeof tryMessage === 'function' ? tryMessage(textOrMessage) : { kind: 'user', body: textOrMessage };
    } catch (err) {
      runState.className = 'run-state error';
      runState.textContent = err.message;
      return false;
    }
  }
  $('send').disabled = true;
  try {
    const response = await fetch(conversationUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(message),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      runState.className = 'run-state error';
      const error = body.error || {};
      // The details name what is wrong (a field, a choice the agent does not have).
      runState.textContent = [error.message, error.details].filter(Boolean).join(' ') || `The server answered ${response.status}.`;
      return false;
    }
    if (typeof textOrMessage === 'string' && typeof trySent === 'function') trySent();
    runState.className = 'run-state';
    runState.textContent = '';
    if (state.agent === agent && state.conversation === conversation) {
      state.stick = true;
      markRunning(body.submissionId);
      renderRunState();
      follow();
      refreshActions();
    }
    return true;
  } catch (err) {
    runState.className = 'run-state error';
    runState.textContent = `Cannot reach flue dev: ${err.message}`;
    return false;
  } finally {
    $('send').disabled = false;
  }
}

function showTab(name) {
  state.tab = name;
  for (const button of document.querySelectorAll('.tab-button')) button.classList.toggle('active', button.dataset.tab === name);
  for (const panel of document.querySelectorAll('.tab-panel')) panel.hidden = panel.id !== `tab-${name}`;
  if (name === 'transcript') renderTranscript();
  // Tabs of their own files (timeline.js) draw when opened.
  document.dispatchEvent(new CustomEvent('flue:tab', { detail: name }));
}

function init() {
  const [agent, conversation] = location.hash.slice(1).split('/').map(decodeURIComponent);
  // The first status answer selects the agent named in the url, else the first one.
  if (agent && conversation) state.pending = { agent, conversation };
  $('composer').addEventListener('submit', async (event) => {
    event.preventDefault();
    const input = $('input');
    const text = input.value.trim();
    const mayBeEmpty = typeof tryAllowsEmpty === 'function' && tryAllowsEmpty();
    if ((!text && !mayBeEmpty) || !state.agent) return;
    if (await send(text)) input.value = '';
  });
  $('input').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  // Scrolling up to read stops following the newest message; sending follows again.
  $('messages').addEventListener('scroll', () => {
    const container = $('messages');
    state.stick = container.scrollHeight - container.scrollTop - container.clientHeight < 80;
  }, { passive: true });
  $('abort').addEventListener('click', () => fetch(`${conversationUrl()}/abort`, { method: 'POST' }));
  $('new-conversation').addEventListener('click', () => { if (state.agent) selectAgent(state.agent, freshId()); $('input').focus(); });
  $('conversation').addEventListener('change', (event) => {
    const id = event.target.value.trim();
    if (state.agent && id) selectAgent(state.agent, id);
  });
  for (const button of document.querySelectorAll('.tab-button')) button.addEventListener('click', () => showTab(button.dataset.tab));
  renderMessages();
  renderActions();
  // While the agent works, pending actions may appear (when the server has them).
  setInterval(() => {
    if (state.running.size && actionsSupported()) refreshActions();
  }, 1500);
  pollStatus();
}

document.addEventListener('DOMContentLoaded', init);
