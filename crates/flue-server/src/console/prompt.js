// The prompt as sent, in the flue dev console: click a model call in the Timeline tab and
// this opens under it what that call was given (system prompt, tools, messages, thinking
// level, output limit) and what it answered, from GET /_flue/dev/prompt/<agent>/<id>.
// A call this `flue dev` process made is shown exactly as it was handed to the provider
// (its role, skill and hook context included; known secrets redacted); an older one has its
// messages rebuilt from the stored log, and the view says which it is.
'use strict';

// A body as the provider got it: JSON indented (it stays JSON), anything else as it is.
function asJson(body) {
  if (body === undefined || body === null) return '';
  if (typeof body !== 'string') return JSON.stringify(body, null, 2);
  try { return JSON.stringify(JSON.parse(body), null, 2); } catch { return body; }
}

function promptBlock(title, open, ...content) {
  const details = h('details', { class: 'block prompt-block' }, h('summary', {}, title), ...content);
  details.open = open;
  return details;
}

function promptMessage(record) {
  let text = '';
  if (record.type === 'user') {
    text = (record.content || []).map((part) => (part.type === 'text' ? part.text : `[${part.type}]`)).join('\n');
  } else if (record.type === 'assistant') {
    text = (record.content || []).map((part) => {
      if (part.type === 'text') return part.text;
      if (part.type === 'thinking') return `(thinking) ${part.text}`;
      if (part.type === 'tool_call') return `→ ${part.name} ${JSON.stringify(part.input)}`;
      return `[${part.type}]`;
    }).join('\n');
  } else if (record.type === 'tool_result') {
    text = `${record.tool_name}${record.is_error ? ' (error)' : ''}: ${record.content}`;
  } else if (record.type === 'compaction') {
    text = record.summary;
  } else if (record.type === 'shell') {
    text = `$ ${record.command}\n${record.stdout}${record.stderr}`;
  } else {
    text = JSON.stringify(record);
  }
  return h('div', { class: 'prompt-message', 'data-type': record.type },
    h('span', { class: 'kind' }, record.type === 'assistant' ? 'agent' : record.type), h('pre', {}, text));
}

function renderPrompt(body) {
  const recorded = body.recorded;
  const head = h('div', { class: 'prompt-head' },
    h('strong', {}, `Model call ${body.turn} of ${body.turns}`), ` · ${body.model} · `,
    h('span', { class: `badge prompt-source ${body.source}` },
      body.source === 'recorded' ? 'recorded as sent' : 'rebuilt from the log'));
  const parts = [head];
  if (recorded) {
    parts.push(promptBlock('System prompt', true, h('pre', { class: 'prompt-system' }, recorded.system)));
    parts.push(promptBlock(`Tools (${recorded.tools.length})`, false,
      h('ul', { class: 'prompt-tools' }, recorded.tools.map((tool) => h('li', { title: tool.description },
        h('code', {}, tool.name), ` ${brief(tool.description.split('\n')[0])}`)))));
  } else {
    const now = body.assembled;
    parts.push(h('p', { class: 'none prompt-note' },
      'This call was not made by this flue dev process (or it is no longer held), so it was not recorded: the messages below are rebuilt from the stored log',
      now && !now.error ? ', and the system prompt and tools are the agent\'s as they are now (what `flue run <agent> --dry-run` shows; a role or skill of that call is not included).' : '.'));
    if (now && now.error) parts.push(h('p', { class: 'run-state error' }, now.error));
    if (now && !now.error) {
      parts.push(promptBlock('System prompt (now)', true, h('pre', { class: 'prompt-system' }, now.system)));
      parts.push(promptBlock(`Tools (now, ${now.tools.length})`, false,
        h('ul', { class: 'prompt-tools' }, now.tools.map((tool) => h('li', { title: tool.description },
          h('code', {}, tool.name), ` ${brief(tool.description.split('\n')[0])}`)))));
    }
  }
  parts.push(promptBlock(`Messages (${body.messages.length})`, !recorded,
    h('div', { class: 'prompt-messages' }, body.messages.map(promptMessage))));
  if (recorded) {
    const request = { model: recorded.model, system: recorded.system, tools: recorded.tools, messages: body.messages, thinking: recorded.thinking, maxOutputTokens: recorded.maxOutputTokens };
    parts.push(promptBlock('Request (as handed to the provider)', false, h('pre', { class: 'prompt-request' }, JSON.stringify(request, null, 2))));
    const { wire, ...answer } = recorded.answer || {};
    parts.push(promptBlock('Answer', false, h('pre', { class: 'prompt-answer' }, JSON.stringify(answer, null, 2))));
    // The provider's own bytes (an HTTP provider's; no headers), when it sent any.
    if (wire) {
      const cut = wire.truncated ? ' (cut at 1 MiB)' : '';
      const tries = wire.attempts > 1 ? ` · attempt ${wire.attempts}` : '';
      parts.push(promptBlock(`HTTP request body · POST ${wire.url}${tries}${cut}`, false, h('pre', { class: 'prompt-wire-request' }, asJson(wire.request))));
      parts.push(promptBlock('HTTP response body', false, h('pre', { class: 'prompt-wire-response' }, asJson(wire.response))));
    }
  } else {
    parts.push(promptBlock('Stored answer', false, h('pre', { class: 'prompt-answer' }, JSON.stringify(body.stored, null, 2))));
  }
  return h('section', { class: 'prompt' }, parts);
}

async function openPrompt(detail) {
  const { session, index, row } = detail;
  const next = row.nextElementSibling;
  if (next && next.classList.contains('prompt')) { next.remove(); return; }
  const url = `/_flue/dev/prompt/${encode(state.agent)}/${encode(state.conversation)}?session=${encodeURIComponent(session)}&index=${index}`;
  let view;
  try {
    const response = await fetch(url, { cache: 'no-store' });
    const body = await response.json().catch(() => ({}));
    view = response.ok ? renderPrompt(body)
      : h('p', { class: 'run-state error prompt' }, (body.error && body.error.message) || `The server answered ${response.status}.`);
  } catch (err) {
    view = h('p', { class: 'run-state error prompt' }, `Cannot reach flue dev: ${err.message}`);
  }
  row.after(view);
}

document.addEventListener('flue:prompt', (event) => openPrompt(event.detail));
