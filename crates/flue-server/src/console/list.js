// The conversation list: every conversation of the store, searched on the server
// (GET /_flue/dev/conversations?q=&agent=&limit=), most recently active first, a page at a
// time: "Show older" appends the page before the last one shown (`before=` the answer's
// `next`). Opening a row loads the conversation as typing its id does (console.js's
// `selectAgent`). While the list is open it asks again with the stamp of the first page
// (`wait=`), and the server answers when a conversation starts, moves or settles; the older
// pages are then read again from the first page's new cursor, so no row falls between pages.
'use strict';

(() => {
  const LIMIT = 100;
  const list = {
    open: false,
    query: '',
    agent: '',
    stamp: null,
    generation: 0,   // grows with every new search; an older poll's answer is dropped
    rows: [],        // the first page, followed live
    older: [],       // the pages "Show older" added after it
    next: null,      // the cursor of the page after the last one shown
    olderRead: 0,    // grows with every read of older pages; an outdated one is dropped
    loadingOlder: false,
    matched: 0,
    total: 0,
    error: null,
  };

  const el = (tag, attrs, ...children) => {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else if (key === 'class') node.className = value;
      else node.setAttribute(key, value === true ? '' : value);
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  };

  const STATUS_TEXT = {
    running: 'running',
    waiting: 'waiting for you',
    settled: 'settled',
    failed: 'failed',
  };

  function ago(ms) {
    const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (seconds < 60) return `${seconds}s ago`;
    const minutes = Math.round(seconds / 60);
    if (minutes < 60) return `${minutes} min ago`;
    const hours = Math.round(minutes / 60);
    if (hours < 48) return `${hours} h ago`;
    return new Date(ms).toISOString().slice(0, 10);
  }

  function tokens(usage) {
    const total = (usage.input_tokens || 0) + (usage.cache_read_tokens || 0)
      + (usage.cache_write_tokens || 0) + (usage.output_tokens || 0);
    if (total >= 1e6) return `${(total / 1e6).toFixed(1)}M`;
    if (total >= 1e4) return `${Math.round(total / 1e3)}k`;
    if (total >= 1e3) return `${(total / 1e3).toFixed(1)}k`;
    return String(total);
  }

  function cost(usage) {
    if (usage.cost_usd === undefined || usage.cost_usd === null) return '–';
    return usage.cost_usd < 0.01 && usage.cost_usd > 0 ? '<$0.01' : `$${usage.cost_usd.toFixed(2)}`;
  }

  // ---------------------------------------------------------------- the panel

  function build() {
    const toggle = el('button', {
      id: 'list-toggle', class: 'button ghost list-toggle', type: 'button',
      title: 'Every conversation of the store', onclick: () => show(!list.open),
    }, 'Conversations');
    const build = document.getElementById('build');
    build.parentNode.insertBefore(toggle, build);

    const search = el('input', {
      id: 'list-search', class: 'list-search', type: 'search', spellcheck: 'false', autocomplete: 'off',
      placeholder: 'Search agent, id or first message', 'aria-label': 'Search conversations',
    });
    let typing = null;
    search.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => { list.query = search.value.trim(); refresh(); }, 150);
    });
    const agent = el('select', { id: 'list-agent', class: 'list-agent', 'aria-label': 'Agent' });
    agent.addEventListener('change', () => { list.agent = agent.value; refresh(); });
    const panel = el('section', { id: 'conversation-list', class: 'list-panel', hidden: true, 'aria-label': 'Conversations' },
      el('div', { class: 'list-head' },
        el('h2', { class: 'list-title' }, 'Conversations'),
        search,
        agent,
        el('span', { id: 'list-count', class: 'list-count' }),
        el('button', { class: 'button ghost', type: 'button', onclick: () => show(false) }, 'Close')),
      el('div', { class: 'list-scroll' },
        el('table', { class: 'list-table' },
          el('thead', {}, el('tr', {},
            ['Status', 'Agent', 'Conversation', 'First message', 'Last activity', 'Turns', 'Tokens', 'Cost']
              .map((name) => el('th', {}, name)))),
          el('tbody', { id: 'list-rows' }))),
      el('p', { id: 'list-empty', class: 'list-empty', hidden: true }),
      el('div', { id: 'list-foot', class: 'list-foot', hidden: true },
        el('button', {
          id: 'list-more', class: 'button ghost list-more', type: 'button',
          title: 'The next page of less recently active conversations', onclick: showOlder,
        }, 'Show older')));
    document.querySelector('main.layout').before(panel);
    document.addEventListener('keydown', (event) => {
      if (event.key === 'Escape' && list.open) show(false);
    });
  }

  function show(open) {
    list.open = open;
    document.getElementById('conversation-list').hidden = !open;
    document.getElementById('list-toggle').classList.toggle('active', open);
    if (open) {
      fillAgents();
      refresh();
      document.getElementById('list-search').focus();
    } else {
      list.generation += 1;
    }
  }

  function fillAgents() {
    const select = document.getElementById('list-agent');
    const names = (state.status && state.status.agents || []).map((agent) => agent.name);
    const current = list.agent;
    select.replaceChildren(el('option', { value: '' }, 'All agents'),
      ...names.map((name) => el('option', { value: name }, name)));
    select.value = names.includes(current) ? current : '';
    list.agent = select.value;
  }

  // The first page, then the older pages without a row the first page holds (one that moved
  // up since they were read).
  function shownRows() {
    const key = (row) => `${row.agent}\u0000${row.id}`;
    const first = new Set(list.rows.map(key));
    return list.rows.concat(list.older.filter((row) => !first.has(key(row))));
  }

  function render() {
    const body = document.getElementById('list-rows');
    const shown = shownRows();
    body.replaceChildren(...shown.map((row) => {
      const current = row.agent === state.agent && row.id === state.conversation;
      return el('tr', {
        class: `list-row${current ? ' current' : ''}`, tabindex: '0',
        'data-agent': row.agent, 'data-id': row.id,
        onclick: () => openRow(row),
        onkeydown: (event) => { if (event.key === 'Enter') openRow(row); },
      },
      el('td', {}, el('span', { class: `list-status ${row.status}` }, STATUS_TEXT[row.status] || row.status)),
      el('td', { class: 'list-agent-name' }, row.agent),
      el('td', { class: 'list-id' }, row.id),
      el('td', { class: 'list-first' }, row.firstMessage || el('span', { class: 'none' }, 'no message')),
      el('td', { class: 'list-when', title: new Date(row.lastActivity).toISOString() }, ago(row.lastActivity)),
      el('td', { class: 'num' }, row.modelTurns),
      el('td', { class: 'num' }, tokens(row.usage || {})),
      el('td', { class: 'num' }, cost(row.usage || {})));
    }));
    const count = document.getElementById('list-count');
    count.textContent = list.error ? list.error : `${shown.length} of ${list.total}`;
    const more = document.getElementById('list-more');
    document.getElementById('list-foot').hidden = !list.next;
    more.disabled = list.loadingOlder;
    more.textContent = list.loadingOlder ? 'Loading…' : 'Show older';
    const empty = document.getElementById('list-empty');
    empty.hidden = shown.length > 0 || Boolean(list.error);
    empty.textContent = list.total ? 'No conversation matches.' : 'No conversations yet: send a message to start one.';
  }

  function openRow(row) {
    show(false);
    selectAgent(row.agent, row.id);
  }

  // ---------------------------------------------------------------- reading the list

  function url(wait, before) {
    const params = new URLSearchParams({ limit: String(LIMIT) });
    if (list.query) params.set('q', list.query);
    if (list.agent) params.set('agent', list.agent);
    if (wait) params.set('wait', wait);
    if (before) params.set('before', before);
    return `/_flue/dev/conversations?${params}`;
  }

  // Reads pages from `cursor` on until `want` rows are read or none are left:
  // {rows, cursor} (the cursor after them, null at the end).
  async function readPages(cursor, want) {
    const rows = [];
    while (cursor && rows.length < want) {
      const response = await fetch(url(null, cursor), { cache: 'no-store' });
      if (!response.ok) throw new Error(`status ${response.status}`);
      const page = await response.json();
      rows.push(...page.conversations);
      cursor = page.next || null;
    }
    return { rows, cursor };
  }

  // Reads the older pages again from the first page's cursor, as many rows as were shown.
  async function rereadOlder(first, generation) {
    const read = ++list.olderRead;
    const pages = await readPages(first.next || null, Math.max(list.older.length, 1));
    if (generation !== list.generation || read !== list.olderRead) return;
    list.older = pages.rows;
    list.next = pages.cursor;
    list.loadingOlder = false;
  }

  // "Show older": the page before the last one shown.
  async function showOlder() {
    if (!list.next || list.loadingOlder) return;
    const generation = list.generation;
    const read = ++list.olderRead;
    list.loadingOlder = true;
    render();
    try {
      const pages = await readPages(list.next, 1);
      if (generation !== list.generation || read !== list.olderRead) return;
      list.older.push(...pages.rows);
      list.next = pages.cursor;
      list.error = null;
    } catch {
      if (generation !== list.generation || read !== list.olderRead) return;
      list.error = 'cannot read older conversations';
    }
    list.loadingOlder = false;
    render();
  }

  // Reads the list now, then follows it while the panel is open and the search unchanged.
  async function refresh() {
    list.generation += 1;
    const generation = list.generation;
    list.older = [];
    list.next = null;
    list.loadingOlder = false;
    let wait = null;
    while (list.open && generation === list.generation) {
      try {
        const response = await fetch(url(wait), { cache: 'no-store' });
        if (generation !== list.generation) return;
        if (!response.ok) throw new Error(`status ${response.status}`);
        const page = await response.json();
        if (generation !== list.generation) return;
        if (list.older.length || list.loadingOlder) await rereadOlder(page, generation);
        else list.next = page.next || null;
        if (generation !== list.generation) return;
        list.rows = page.conversations;
        list.matched = page.matched;
        list.total = page.total;
        list.stamp = page.stamp;
        list.error = null;
        wait = page.stamp;
        render();
      } catch {
        if (generation !== list.generation) return;
        list.error = 'cannot read the conversations, retrying…';
        render();
        await new Promise((resolve) => setTimeout(resolve, 1000));
        wait = null;
      }
    }
  }

  document.addEventListener('DOMContentLoaded', build);
})();
