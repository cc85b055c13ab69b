// The dev console's "try without editing files": per message, the composer picks the model,
// the thinking level and the role, runs a skill with arguments, or sends a signal; on each
// message of the conversation, retry (the same message and choices as a new submission),
// fork from here and rewind files (with undo). Nothing here changes a file of the workspace
// except a rewind the user confirms.
//
// The choices travel with the message (the protocol's `model`, `thinking`, `role`, `skill`,
// `args`: docs/http-api.md) and come back on it as its `data-options` part, so a retry sends
// exactly what the first send did. Loaded after console.js, whose globals (state, h, $, send,
// forkAt, rewindTo, postJson, conversationUrl, renderMessages) it uses; console.js calls the
// try* hooks below when they exist.
'use strict';

const THINKING_LEVELS = ['off', 'minimal', 'low', 'medium', 'high', 'xhigh'];

const tryState = {
  built: false,
  mode: 'message',       // 'message' | 'skill' | 'signal'
  rewound: null,         // {id, count}: the last rewind, until undone or dismissed
};

// ---------------------------------------------------------------- the composer's controls

function tryAgent() {
  return state.status && state.status.agents.find((agent) => agent.name === state.agent);
}

function trySelect(id, label, options) {
  return h('label', { class: 'try-field', for: id }, h('span', {}, label),
    h('select', { id }, options.map(([value, text]) => h('option', { value }, text))));
}

// Keeps a select's choice when its options are rebuilt (a reload, another agent), if it still
// exists; else back to the first (the agent's own).
function tryFill(id, options) {
  const select = $(id);
  if (!select) return;
  const before = select.value;
  select.replaceChildren(...options.map(([value, text]) => h('option', { value }, text)));
  select.value = options.some(([value]) => value === before) ? before : options[0][0];
}

function tryBuild() {
  if (tryState.built) return;
  tryState.built = true;
  const row = h('div', { class: 'try-row', id: 'try-controls' },
    trySelect('try-mode', 'Send', [['message', 'message'], ['skill', 'run skill'], ['signal', 'signal']]),
    trySelect('try-model', 'Model', [['', "agent's"]]),
    trySelect('try-thinking', 'Thinking', [['', "agent's"], ...THINKING_LEVELS.map((level) => [level, level])]),
    trySelect('try-role', 'Role', [['', "agent's"]]),
    h('span', { class: 'try-skill', hidden: true },
      trySelect('try-skill', 'Skill', [['', '']]),
      h('label', { class: 'try-field wide', for: 'try-args' }, h('span', {}, 'Arguments'),
        h('input', { id: 'try-args', type: 'text', spellcheck: 'false', autocomplete: 'off',
          placeholder: 'file=src/lib.rs; depth=2  (or a JSON object)' }))),
    h('span', { class: 'try-signal', hidden: true },
      h('label', { class: 'try-field', for: 'try-signal-type' }, h('span', {}, 'Type'),
        h('input', { id: 'try-signal-type', type: 'text', spellcheck: 'false', autocomplete: 'off', placeholder: 'github.issue_opened' })),
      h('label', { class: 'try-field wide', for: 'try-attributes' }, h('span', {}, 'Attributes'),
        h('input', { id: 'try-attributes', type: 'text', spellcheck: 'false', autocomplete: 'off', placeholder: 'repo=flue; number=7' }))));
  const composer = $('composer');
  composer.insertBefore(row, composer.querySelector('.composer-actions'));
  $('try-mode').addEventListener('change', (event) => tryMode(event.target.value));
  row.addEventListener('change', tryMarkChosen);
}

function tryMode(mode) {
  tryState.mode = mode;
  $('try-mode').value = mode;
  document.querySelector('.try-skill').hidden = mode !== 'skill';
  document.querySelector('.try-signal').hidden = mode !== 'signal';
  $('input').placeholder = {
    message: 'Message the agent (Enter sends, Shift+Enter adds a line)',
    skill: 'Anything to add to the skill run (optional)',
    signal: "The signal's body (optional)",
  }[mode];
  tryMarkChosen();
}

// A picker set to something else than the agent's own stands out.
function tryMarkChosen() {
  for (const id of ['try-model', 'try-thinking', 'try-role']) {
    const select = $(id);
    select.parentElement.classList.toggle('chosen', select.value !== '');
  }
}

// Called by console.js whenever the status or the selected agent changes. A re-render with
// the same build and agent (the agent tab's tool list arriving, say) keeps the choices as
// they are: only a new build or another agent changes what can be chosen.
function tryStatus() {
  tryBuild();
  const key = JSON.stringify([state.agent, state.status && state.status.build]);
  if (key === tryState.statusKey) return;
  tryState.statusKey = key;
  const agent = tryAgent();
  const status = state.status || { roles: [], skills: [] };
  const own = agent && agent.model ? `agent's (${agent.model})` : "agent's";
  const models = ((agent && agent.models) || []).filter((model) => !agent || model !== agent.model);
  tryFill('try-model', [['', own], ...models.map((model) => [model, model])]);
  const role = agent && agent.role ? `agent's (${agent.role})` : 'none';
  tryFill('try-role', [['', role], ...status.roles.map((item) => [item.name, item.name])]);
  const skills = [...new Set([...((agent && agent.skills) || []), ...status.skills.map((item) => item.name)])].sort();
  tryFill('try-skill', skills.length ? skills.map((name) => [name, name]) : [['', 'no skills']]);
  tryMarkChosen();
}

// `a=1; b=two` (or lines) as `flue run --arg` reads them: JSON when it parses, else a string;
// or one JSON object.
function tryPairs(text, what) {
  const trimmed = text.trim();
  if (!trimmed) return {};
  if (trimmed.startsWith('{')) {
    let parsed;
    try { parsed = JSON.parse(trimmed); } catch (err) { throw new Error(`${what}: ${err.message}`); }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error(`${what} must be a JSON object`);
    return parsed;
  }
  const pairs = {};
  for (const item of trimmed.split(/[;\n]/).map((piece) => piece.trim()).filter(Boolean)) {
    const at = item.indexOf('=');
    if (at <= 0) throw new Error(`${what}: write key=value, not ${JSON.stringify(item)}`);
    const value = item.slice(at + 1).trim();
    let parsed = value;
    try { parsed = JSON.parse(value); } catch { parsed = value; }
    pairs[item.slice(0, at).trim()] = parsed;
  }
  return pairs;
}

// The message the composer sends for `text` (console.js's send() posts it). Throws, with a
// message naming the field, when a field does not parse.
function tryMessage(text) {
  tryBuild();
  let message;
  if (tryState.mode === 'signal') {
    const type = $('try-signal-type').value.trim();
    if (!type) throw new Error('A signal needs a type.');
    const attributes = {};
    for (const [name, value] of Object.entries(tryPairs($('try-attributes').value, 'Attributes'))) {
      attributes[name] = typeof value === 'string' ? value : JSON.stringify(value);
    }
    message = { kind: 'signal', type, body: text };
    if (Object.keys(attributes).length) message.attributes = attributes;
  } else {
    message = { kind: 'user', body: text };
    if (tryState.mode === 'skill') {
      const skill = $('try-skill').value;
      if (!skill) throw new Error('Pick a skill to run.');
      message.skill = skill;
      const args = tryPairs($('try-args').value, 'Arguments');
      if (Object.keys(args).length) message.args = args;
    }
  }
  for (const [field, id] of [['model', 'try-model'], ['thinking', 'try-thinking'], ['role', 'try-role']]) {
    const value = $(id).value;
    if (value) message[field] = value;
  }
  return message;
}

// Whether the composer may send an empty text: a skill run or a signal may have no body.
function tryAllowsEmpty() {
  return tryState.mode !== 'message';
}

// After a send: a skill run or a signal is one message; the pickers of model, thinking and
// role stay as chosen (each message shows what it used).
function trySent() {
  if (tryState.mode !== 'message') {
    $('try-args').value = '';
    tryMode('message');
  }
}

// ---------------------------------------------------------------- on each message

// The choices a message was sent with (its `data-options` part), or null.
function tryOptionsOf(message) {
  const part = (message.parts || []).find((candidate) => candidate.type === 'data-options');
  return part ? part.data : null;
}

function tryBadges(options) {
  if (!options) return null;
  const badges = [];
  if (options.skill) {
    const args = options.args && Object.keys(options.args).length ? ` ${JSON.stringify(options.args)}` : '';
    badges.push(`skill ${options.skill}${args}`);
  }
  if (options.model) badges.push(`model ${options.model}`);
  if (options.thinking) badges.push(`thinking ${options.thinking}`);
  if (options.role) badges.push(`role ${options.role}`);
  return h('div', { class: 'try-badges' }, badges.map((text) => h('span', { class: 'badge' }, text)));
}

// The message `message` (a user message or a signal of the snapshot) as it was sent.
function tryResend(message) {
  const text = message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');
  let payload;
  if (message.role === 'user') {
    payload = { kind: 'user', body: text };
  } else {
    const attributes = { ...((message.signal && message.signal.attributes) || {}) };
    const type = attributes.type;
    delete attributes.type;
    payload = { kind: 'signal', type, body: text };
    if (Object.keys(attributes).length) payload.attributes = attributes;
    if (message.signal && message.signal.tagName) payload.tagName = message.signal.tagName;
  }
  return Object.assign(payload, tryOptionsOf(message) || {});
}

function tryRetry(message) {
  if (message.parts.some((part) => part.type === 'file')) return null;
  return h('button', {
    type: 'button', class: 'try-retry writes',
    title: 'Send this message again, with the same choices, as a new submission',
    onclick: () => send(tryResend(message)),
  }, 'retry');
}

// The root-session turn a message became (fork and rewind take it), when it reached the log.
function tryTurn(message) {
  const turns = state.transcript && state.transcript.turns;
  return turns && message.submissionId ? turns[message.submissionId] : undefined;
}

// The bubble of a skill run sent without text: which skill it ran.
function tryEmptyText(message) {
  const options = tryOptionsOf(message);
  return options && options.skill ? `run skill ${options.skill}` : '';
}

// Under a user message or a signal: the choices it was sent with, and retry, fork from here,
// rewind files.
function tryUserTools(message) {
  const turn = tryTurn(message);
  const busy = state.running.has(message.submissionId);
  const actions = h('div', { class: 'try-actions writes', 'data-submission': message.submissionId || '' },
    busy ? null : tryRetry(message),
    turn ? h('button', {
      type: 'button', class: 'try-fork',
      title: 'Open a new conversation holding the turns before this message',
      onclick: () => forkAt(turn),
    }, 'fork here') : null,
    turn && !busy && (typeof rewindable !== 'function' || rewindable(turn)) ? h('button', {
      type: 'button', class: 'try-rewind',
      title: "Put the workspace's files back as they were before this message (shows the files first)",
      onclick: () => rewindTo(turn),
    }, 'rewind files') : null);
  return [tryBadges(tryOptionsOf(message)), actions];
}

// Under a failed submission's advisory: retry its message.
function tryFailedTools(advisory) {
  const sent = state.messages.find((message) => message.submissionId === advisory.submissionId
    && (message.role === 'user' || message.purpose === 'dispatch'));
  if (!sent) return null;
  const button = tryRetry(sent);
  return button ? h('div', { class: 'try-actions writes' }, button) : null;
}

// ---------------------------------------------------------------- rewind and undo

// Called by console.js once a rewind is done: offers to undo it.
function tryRewound(id, count) {
  tryState.rewound = { id, count };
  tryRenderRewound();
}

function tryRenderRewound() {
  let bar = $('try-rewound');
  if (!tryState.rewound) { if (bar) bar.remove(); return; }
  if (!bar) {
    bar = h('div', { id: 'try-rewound', class: 'try-rewound', role: 'status' });
    const composer = $('composer');
    composer.insertBefore(bar, composer.firstChild);
  }
  const { id, count } = tryState.rewound;
  bar.replaceChildren(
    h('span', {}, `Rewound ${count} file(s) (rewind ${id}).`),
    h('button', { type: 'button', class: 'button small try-undo', onclick: tryUndo }, 'Undo'),
    h('button', { type: 'button', class: 'button small ghost', onclick: () => { tryState.rewound = null; tryRenderRewound(); } }, 'Dismiss'));
}

async function tryUndo() {
  const rewound = tryState.rewound;
  if (!rewound) return;
  try {
    const result = await postJson(`${conversationUrl()}/rewind`, { undo: rewound.id });
    if (!result.ok) { historyError(result.body, result.status); return; }
    tryState.rewound = null;
    tryRenderRewound();
    const runState = $('run-state');
    runState.className = 'run-state';
    runState.textContent = `Undid rewind ${rewound.id}.`;
  } catch (err) {
    historyError({ error: { message: `Cannot reach flue dev: ${err.message}` } }, 0);
  }
}
