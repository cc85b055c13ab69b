// The Agent tab: what the selected agent is and gets. Every tool its model is offered (built-in,
// command, custom, MCP tools with their server, task, load_skill, state and memory tools,
// permissions_check) with its policy: `allow` (runs at once), `always ask` (waits for a person),
// `application` (a custom tool: the application answers it); and its file, skills, subagents
// and roles as links that show the file's source here.
//
// Routes (console.rs): GET /_flue/dev/tools/<agent> lists the tools (the assembly layer opens
// the agent as a conversation would, its MCP servers connected); POST
// /_flue/dev/tools/<agent>/run runs one by hand (below); GET
// /_flue/dev/source/<agent|skill|role>/<name> serves a file of the build, and only those.
'use strict';

const flueAgentTab = (() => {
  // `${build}:${agent}` -> {state: 'loading' | 'ok' | 'error', tools, error}
  const listings = new Map();
  // The file shown instead of the agent ({kind, name, state, file, error}), or null.
  let viewing = null;

  const ORIGINS = {
    'built-in': 'built-in', command: 'command tool', custom: 'custom tool', code: 'from code',
    mcp: 'MCP', task: 'delegation', skills: 'skills', state: 'state', memory: 'memory',
    result: 'result', runtime: 'runtime',
  };
  const POLICIES = { allow: 'allow', always_ask: 'always ask', application: 'application answers' };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
      else if (name === 'class') node.className = value;
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function encode(segment) { return encodeURIComponent(segment); }

  // Renders the tab for `agent` (an entry of the build status) into `panel`; `rerender` draws
  // it again when an answer arrives.
  let shownAgent = null;
  function render(panel, agent, status, rerender) {
    if (agent.name !== shownAgent) { viewing = null; shownAgent = agent.name; }
    if (viewing) { panel.replaceChildren(renderSource(rerender)); return; }
    const listing = toolListing(agent, status, rerender);
    panel.replaceChildren(
      el('h3', { class: 'detail-title' }, agent.name),
      el('p', { class: 'detail-desc' }, agent.description || 'No description.'),
      el('dl', { class: 'facts' },
        el('dt', {}, 'Model'), el('dd', {}, agent.model ? el('span', { class: 'badge model' }, agent.model) : el('span', { class: 'none' }, 'none')),
        el('dt', {}, 'File'), el('dd', {}, fileLink('agent', agent.name, agent.path, rerender)),
        el('dt', {}, 'Skills'), el('dd', {}, links('skill', agent.skills, rerender)),
        el('dt', {}, 'Subagents'), el('dd', {}, links('agent', agent.subagents, rerender)),
        agent.mcp.length ? [el('dt', {}, 'MCP'), el('dd', {}, chips(agent.mcp))] : null,
        el('dt', {}, 'Sandbox'), el('dd', {}, agent.sandbox || 'workspace default'),
        el('dt', {}, 'Role'), el('dd', {}, agent.role ? fileLink('role', agent.role, null, rerender) : el('span', { class: 'none' }, 'none')),
        (status.roles || []).length ? [el('dt', { title: 'The roles a call may name' }, 'Roles'), el('dd', {}, links('role', status.roles.map((role) => role.name), rerender))] : null),
      el('h4', { class: 'agent-section' }, 'Tools', listing.state === 'ok' ? el('span', { class: 'tool-count' }, String(listing.tools.length)) : null),
      renderTools(agent, listing));
  }

  function chips(items) {
    return el('div', { class: 'chips' }, items.map((item) => el('span', { class: 'badge' }, item)));
  }

  function links(kind, names, rerender) {
    if (!names || !names.length) return el('span', { class: 'none' }, 'none');
    return el('div', { class: 'chips' }, names.map((name) => fileLink(kind, name, null, rerender)));
  }

  function fileLink(kind, name, label, rerender) {
    return el('button', {
      type: 'button', class: 'source-link', 'data-source': `${kind}/${name}`,
      title: `Show the ${kind} file`,
      onclick: () => show(kind, name, rerender),
    }, label || name);
  }

  // The agent's tools from the tools route, asked once per build and agent.
  function toolListing(agent, status, rerender) {
    const key = `${status.build}:${agent.name}`;
    let listing = listings.get(key);
    if (listing) return listing;
    listing = { state: 'loading', tools: [], error: null };
    listings.set(key, listing);
    fetch(`/_flue/dev/tools/${encode(agent.name)}`, { cache: 'no-store' })
      .then(async (response) => {
        const body = await response.json().catch(() => ({}));
        if (response.ok && !body.error) Object.assign(listing, { state: 'ok', tools: body.tools || [] });
        else Object.assign(listing, { state: 'error', error: (body.error && body.error.message) || `The server answered ${response.status}.` });
      })
      .catch((err) => Object.assign(listing, { state: 'error', error: `Cannot reach flue dev: ${err.message}` }))
      .finally(() => rerender());
    return listing;
  }

  function renderTools(agent, listing) {
    if (listing.state === 'loading') return el('p', { class: 'none' }, 'Listing the tools (MCP servers connect on first use)…');
    if (listing.state === 'error') {
      // The names the build status carries, and why the full list is missing.
      return el('div', {}, el('p', { class: 'tools-error' }, listing.error),
        chips(agent.tools || []));
    }
    if (!listing.tools.length) return el('p', { class: 'none' }, 'No tools.');
    return el('ul', { class: 'tool-list' }, listing.tools.map((tool) => el('li', {
      class: `tool-row policy-${tool.policy}`, 'data-tool': tool.name, 'data-policy': tool.policy, 'data-origin': tool.origin,
    },
    el('div', { class: 'tool-row-head' },
      el('code', { class: 'tool-row-name' }, tool.name),
      el('span', { class: `badge origin-${tool.origin}` }, tool.server ? `MCP · ${tool.server}` : ORIGINS[tool.origin] || tool.origin),
      el('span', { class: `badge policy policy-${tool.policy}`, title: tool.why }, POLICIES[tool.policy] || tool.policy)),
    tool.description ? el('div', { class: 'tool-row-desc' }, tool.description) : null,
    // Why, when a rule decided or the tool does not simply run.
    tool.policy !== 'allow' || tool.why !== "the tool's own default" ? el('div', { class: 'tool-row-why' }, tool.why) : null,
    RUNNABLE.has(tool.origin) ? runForm(agent.name, tool) : null)));
  }

  // ---------------------------------------------------------------- run one tool by hand
  //
  // POST /_flue/dev/tools/<agent>/run {tool, input, confirmed}: the tool runs in the agent's
  // sandbox outside any conversation, its policy applied (one that asks first runs after the
  // person confirms here; a custom tool, and the tools that need a conversation, never run).
  // Each tool's form is kept across redraws of the tab, so its input and result stay.
  const RUNNABLE = new Set(['built-in', 'command', 'mcp', 'code']);
  const forms = new Map();

  function runForm(agentName, tool) {
    const key = `${agentName}\u0000${tool.name}`;
    if (forms.has(key)) return forms.get(key);
    const input = el('textarea', { class: 'action-value tool-run-input', rows: 3, spellcheck: 'false', 'aria-label': `${tool.name}'s input (JSON)` });
    input.value = '{}';
    const result = el('div', { class: 'tool-run-result', role: 'status' });
    const run = el('button', { type: 'button', class: 'button primary small tool-run-go' }, 'Run');
    const body = el('div', { class: 'tool-run-body', hidden: true }, input, el('div', { class: 'action-buttons' }, run), result);
    const toggle = el('button', { type: 'button', class: 'link tool-run-toggle', title: 'Run this tool once with an input you write, its policy applied' }, 'run by hand');
    toggle.addEventListener('click', () => { body.hidden = !body.hidden; if (!body.hidden) input.focus(); });
    run.addEventListener('click', () => runTool(agentName, tool, input.value, result, run));
    const form = el('div', { class: 'tool-run writes', 'data-run-tool': tool.name }, toggle, body);
    forms.set(key, form);
    return form;
  }

  async function runTool(agentName, tool, text, result, button) {
    let input;
    try { input = JSON.parse(text || '{}'); } catch (err) {
      result.replaceChildren(el('pre', { class: 'error' }, `The input is not JSON: ${err.message}`));
      return;
    }
    button.disabled = true;
    try {
      let answer = await post(agentName, { tool: tool.name, input });
      if (answer.outcome === 'confirm') {
        // The policy asks before each call: this person is the one asked.
        if (!window.confirm(`${tool.name} asks before each call (${answer.why}). Run it with this input?`)) {
          result.replaceChildren(el('p', { class: 'none' }, 'Not run.'));
          return;
        }
        answer = await post(agentName, { tool: tool.name, input, confirmed: true });
      }
      result.replaceChildren(shownAnswer(answer));
    } catch (err) {
      result.replaceChildren(el('pre', { class: 'error' }, err.message));
    } finally {
      button.disabled = false;
    }
  }

  async function post(agentName, body) {
    const response = await fetch(`/_flue/dev/tools/${encode(agentName)}/run`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error((answer.error && answer.error.message) || `The server answered ${response.status}.`);
    return answer;
  }

  function shownAnswer(answer) {
    const json = (value) => (typeof value === 'string' ? value : JSON.stringify(value, null, 2));
    if (answer.outcome === 'ok') return el('div', {}, el('h4', {}, 'Output'), el('pre', { class: 'tool-run-output' }, json(answer.output)));
    if (answer.outcome === 'error') return el('div', {}, el('h4', {}, 'Error'), el('pre', { class: 'error tool-run-error' }, json(answer.error)));
    return el('p', { class: 'tool-run-refused' }, `Not run: ${answer.why || answer.outcome}`);
  }

  // Shows the source of the build's `kind` file `name` in the tab.
  function show(kind, name, rerender) {
    const shown = { kind, name, state: 'loading', file: null, error: null };
    viewing = shown;
    rerender();
    fetch(`/_flue/dev/source/${encode(kind)}/${encode(name)}`, { cache: 'no-store' })
      .then(async (response) => {
        const body = await response.json().catch(() => ({}));
        if (response.ok) Object.assign(shown, { state: 'ok', file: body });
        else Object.assign(shown, { state: 'error', error: (body.error && body.error.message) || `The server answered ${response.status}.` });
      })
      .catch((err) => Object.assign(shown, { state: 'error', error: `Cannot reach flue dev: ${err.message}` }))
      .finally(() => { if (viewing === shown) rerender(); });
  }

  function renderSource(rerender) {
    const shown = viewing;
    const back = el('button', { type: 'button', class: 'button ghost small source-back', onclick: () => { viewing = null; rerender(); } }, '← Agent');
    const head = el('div', { class: 'source-head' }, back,
      el('span', { class: 'badge' }, shown.kind),
      el('strong', {}, shown.name),
      shown.file ? el('code', { class: 'source-path' }, shown.file.path) : null);
    if (shown.state === 'loading') return el('div', { class: 'source-view' }, head, el('p', { class: 'none' }, 'Reading…'));
    if (shown.state === 'error') return el('div', { class: 'source-view' }, head, el('p', { class: 'tools-error' }, shown.error));
    const lines = shown.file.text.replace(/\n$/, '').split('\n');
    return el('div', { class: 'source-view' }, head,
      el('pre', { class: 'source-text', 'data-path': shown.file.path },
        lines.map((line) => el('span', { class: 'source-line' }, line, '\n'))));
  }

  return { render, show };
})();
