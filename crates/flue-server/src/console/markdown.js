// Markdown in the console's replies: headings, lists, task lists, code blocks with syntax
// highlighting, tables, block quotes, links, emphasis.
//
// Safety: a reply is text from a model, so nothing of it is ever parsed as HTML. The vendored
// `marked` lexer turns the text into tokens, Prism's tokenizer turns code into tokens, and this
// file builds the elements from those tokens with createElement and textContent only. HTML in a
// reply (`<script>`, `<img onerror>`, `<iframe>`) is shown as the text it is; a link is a link
// only for http(s) and mailto (others are shown as their text) and opens in a new tab with
// rel="noopener noreferrer"; an image is never loaded (it is shown as a link to its address).
// The page's Content-Security-Policy backs this up (console.rs).
//
// Streaming: a reply's text grows a few characters at a time and the chat re-renders on every
// update, so rendering from scratch would cost the reply's length at every update (quadratic).
// Instead a reply's text is cut at the starts of its top-level blocks (a line at the left edge
// after a blank line, outside a code fence, that does not continue a list): every block before
// the last is complete, rendered once and kept; only the last block is rendered again. A code
// fence still open is shown as plain text and highlighted once it closes. Link reference
// definitions (`[x]: url`) apply within their own block.
'use strict';

const flueMarkdown = (() => {
  // Per rendered text (its key: message and part): the text seen, the complete blocks with
  // their elements, and where the scan of lines stopped.
  const entries = new Map();
  const MAX_ENTRIES = 500;
  // Characters handed to the lexer, for the test that a growing reply is not re-rendered
  // quadratically.
  const stats = { lexed: 0, blocks: 0 };

  const FENCE = /^ {0,3}(`{3,}|~{3,})/;
  const LIST_ITEM = /^(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)/;

  function newEntry() {
    const root = document.createElement('div');
    root.className = 'text markdown';
    return {
      text: '', blocks: [], tailStart: 0, scanned: 0, fence: null, blankBefore: false,
      // The element shown, holding the first `appended` blocks' elements, then `tail`'s.
      root, appended: 0, tail: [], drawn: false,
    };
  }

  // The element of `text`; `key` names where it is shown, so a text that grows from one call to
  // the next is rendered incrementally. Without a key, rendered from scratch.
  // The element is the same from one call to the next (the chat moves it into its new
  // drawing): only the blocks completed since and the last block change in it.
  function render(text, key) {
    if (!key) {
      const out = document.createElement('div');
      out.className = 'text markdown';
      out.append(...renderBlock(text, false));
      return out;
    }
    let entry = entries.get(key);
    if (!entry || !text.startsWith(entry.text)) {
      entry = newEntry();
      if (entries.size >= MAX_ENTRIES) entries.delete(entries.keys().next().value);
    }
    entries.delete(key);
    entries.set(key, entry);
    if (entry.drawn && entry.text === text) return entry.root;
    entry.text = text;
    entry.drawn = true;
    scan(entry, text);
    // What follows the blocks drawn before (the last drawing's tail): the blocks completed
    // since, then the new tail. The drawn nodes are changed into them in place where they
    // have the same shape, so text that grew is appended to and a selection in it stays.
    const completed = entry.blocks.slice(entry.appended);
    const tail = renderBlock(text.slice(entry.tailStart), entry.fence !== null);
    const kept = morphNodes(entry.root, entry.tail, [...completed.flatMap((item) => item.nodes), ...tail]);
    let at = 0;
    for (const item of completed) {
      item.nodes = kept.slice(at, at + item.nodes.length);
      at += item.nodes.length;
    }
    entry.appended = entry.blocks.length;
    entry.tail = kept.slice(at);
    return entry.root;
  }

  // Changes the drawn nodes `old` (children of `parent`, at its end) into `fresh`: a node of
  // the same kind is kept and changed, another is replaced; returns the nodes drawn now.
  function morphNodes(parent, old, fresh) {
    const out = fresh.map((node, idx) => {
      const before = old[idx];
      if (before && sameKind(before, node)) { morph(before, node); return before; }
      if (before) before.replaceWith(node); else parent.append(node);
      return node;
    });
    for (const extra of old.slice(fresh.length)) extra.remove();
    return out;
  }

  function sameKind(a, b) {
    return a.nodeType === b.nodeType && a.nodeName === b.nodeName;
  }

  // `a` made to show what `b` shows: a text is appended to when it grew; an element's
  // attributes are copied and its children changed the same way.
  function morph(a, b) {
    const shown = (text) => (typeof visibleBidi === 'function' ? visibleBidi(text) : text);
    if (a.nodeType === Node.TEXT_NODE) {
      const want = shown(b.data);
      if (a.data === want) return;
      if (want.startsWith(a.data)) a.appendData(want.slice(a.data.length));
      else a.data = want;
      return;
    }
    if (a.nodeType !== Node.ELEMENT_NODE) return;
    for (const { name } of [...a.attributes]) if (!b.hasAttribute(name)) a.removeAttribute(name);
    for (const { name, value } of [...b.attributes]) if (a.getAttribute(name) !== value) a.setAttribute(name, value);
    const children = [...b.childNodes];
    morphNodes(a, [...a.childNodes], children);
  }

  // Finds the block starts among the complete lines not scanned yet, rendering each block that
  // is complete.
  function scan(entry, text) {
    let pos = entry.scanned;
    for (;;) {
      const end = text.indexOf('\n', pos);
      if (end < 0) break;
      const line = text.slice(pos, end);
      const blank = /^[ \t]*$/.test(line);
      if (entry.fence !== null) {
        const close = line.match(FENCE);
        if (close && close[1][0] === entry.fence[0] && close[1].length >= entry.fence.length
          && /^[ \t]*$/.test(line.slice(close[0].length))) entry.fence = null;
      } else {
        const startsBlock = entry.blankBefore && !blank && !/^[ \t]/.test(line) && !LIST_ITEM.test(line);
        if (startsBlock && pos > entry.tailStart) {
          const source = text.slice(entry.tailStart, pos);
          entry.blocks.push({ nodes: renderBlock(source, false) });
          entry.tailStart = pos;
        }
        const open = line.match(FENCE);
        if (open && !(open[1][0] === '`' && line.slice(open[0].length).includes('`'))) entry.fence = open[1];
      }
      entry.blankBefore = blank && entry.fence === null;
      pos = end + 1;
    }
    entry.scanned = pos;
  }

  // The elements of one piece of markdown. `openFence`: it ends inside a code fence still
  // being written (shown as plain text until it closes).
  function renderBlock(source, openFence) {
    if (!source) return [];
    stats.lexed += source.length;
    stats.blocks += 1;
    // Text the lexer or the builder cannot take (nesting deep enough to exhaust the stack)
    // is shown as it is.
    try {
      return blocks(marked.lexer(source, { gfm: true }), openFence);
    } catch {
      return [el('p', {}, source)];
    }
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'class') node.className = value;
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function blocks(tokens, openFence) {
    const out = [];
    tokens.forEach((token, idx) => {
      const node = block(token, openFence && idx === tokens.length - 1);
      if (node) out.push(node);
    });
    return out;
  }

  function block(token, open) {
    switch (token.type) {
      case 'space':
      case 'def':
        return null;
      case 'heading':
        return el(`h${Math.min(Math.max(token.depth, 1), 6)}`, {}, inline(token.tokens));
      case 'paragraph':
        return el('p', {}, inline(token.tokens));
      case 'text':
        return el('p', {}, token.tokens ? inline(token.tokens) : decode(token.text));
      case 'code':
        return code(token, open);
      case 'blockquote':
        return el('blockquote', {}, blocks(token.tokens || [], false));
      case 'hr':
        return el('hr');
      case 'list':
        return list(token);
      case 'table':
        return table(token);
      case 'html':
        // Shown as the text it is, never parsed.
        return el(token.block ? 'pre' : 'p', { class: 'md-html' }, token.text);
      default:
        return token.raw ? el('p', {}, token.raw) : null;
    }
  }

  function list(token) {
    const start = token.ordered && Number(token.start) > 1 ? Number(token.start) : null;
    return el(token.ordered ? 'ol' : 'ul', { start, class: token.items.some((item) => item.task) ? 'md-tasks' : null },
      token.items.map((item) => el('li', {},
        (item.tokens || []).map((child) => {
          if (child.type === 'checkbox') {
            return el('input', { type: 'checkbox', disabled: true, checked: child.checked || null });
          }
          // A tight list's item holds bare text, not paragraphs.
          if (child.type === 'text' && !item.loose) return child.tokens ? inline(child.tokens) : decode(child.text);
          return block(child, false);
        }))));
  }

  function table(token) {
    const cell = (tag, item, idx) => el(tag, { class: token.align[idx] ? `md-align-${token.align[idx]}` : null }, inline(item.tokens));
    return el('div', { class: 'md-table' }, el('table', {},
      el('thead', {}, el('tr', {}, token.header.map((item, idx) => cell('th', item, idx)))),
      el('tbody', {}, token.rows.map((row) => el('tr', {}, row.map((item, idx) => cell('td', item, idx)))))));
  }

  // A code block: its language named above it, highlighted when Prism knows the language (and
  // the fence is closed).
  function code(token, open) {
    const named = (token.lang || '').trim().split(/\s+/)[0].toLowerCase();
    const lang = /^[a-z0-9_+#.-]{1,32}$/.test(named) ? named : '';
    const name = Object.hasOwn(ALIASES, lang) ? ALIASES[lang] : lang;
    const grammar = !open && lang && window.Prism && Object.hasOwn(Prism.languages, name) ? Prism.languages[name] : null;
    const body = el('code', { class: lang ? `md-lang-${lang.replace(/[^a-z0-9_-]/g, '')}` : null });
    if (grammar && typeof grammar === 'object') {
      try {
        body.append(...prismNodes(Prism.tokenize(token.text, grammar)));
      } catch {
        body.replaceChildren(token.text);
      }
    } else {
      body.append(token.text);
    }
    // The copy button works through the page's one click handler (studio.js).
    return el('div', { class: 'md-code' },
      el('div', { class: 'md-code-head' }, lang ? el('span', { class: 'md-code-lang' }, lang) : null,
        el('button', { class: 'md-copy', type: 'button', title: 'Copy the code' }, 'copy')),
      el('pre', {}, body));
  }

  const ALIASES = { ts: 'typescript', tsx: 'typescript', jsx: 'javascript', mjs: 'javascript', cjs: 'javascript', rs: 'rust', sh: 'bash', shell: 'bash', zsh: 'bash', console: 'bash', yml: 'yaml', golang: 'go', patch: 'diff', python3: 'python' };

  function prismNodes(stream) {
    const items = Array.isArray(stream) ? stream : [stream];
    return items.map((item) => {
      if (typeof item === 'string') return document.createTextNode(item);
      const aliases = Array.isArray(item.alias) ? item.alias : item.alias ? [item.alias] : [];
      const span = el('span', { class: ['token', item.type, ...aliases].filter((name) => /^[\w-]+$/.test(name)).join(' ') });
      span.append(...prismNodes(item.content));
      return span;
    });
  }

  function inline(tokens) {
    return (tokens || []).map(inlineToken);
  }

  function inlineToken(token) {
    switch (token.type) {
      case 'text':
        return token.tokens ? inline(token.tokens) : decode(token.text);
      case 'escape':
        return token.text;
      case 'strong':
        return el('strong', {}, inline(token.tokens));
      case 'em':
        return el('em', {}, inline(token.tokens));
      case 'del':
        return el('del', {}, inline(token.tokens));
      case 'codespan':
        return el('code', {}, token.text);
      case 'br':
        return el('br');
      case 'link':
        return link(token.href, inline(token.tokens), token.title);
      case 'image':
        // Never loaded: a link to it (when its address may be opened), else its text.
        return link(token.href, `image: ${token.text || token.href}`, token.title, 'md-image');
      case 'html':
        return el('code', { class: 'md-html' }, token.text);
      default:
        return token.raw || '';
    }
  }

  // A link when `href` is http(s) or mailto, opened in a new tab without access to this page;
  // otherwise its text alone.
  function link(href, children, title, className) {
    const address = String(href || '').trim();
    if (!/^(https?:\/\/|mailto:)/i.test(address)) return el('span', { class: className || 'md-unlinked', title: address || null }, children);
    return el('a', { href: address, title: title || address, target: '_blank', rel: 'noopener noreferrer', class: className || null }, children);
  }

  // HTML character references in text (`&amp;`, `&#39;`), as a browser would show them.
  const NAMED = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0', copy: '©', reg: '®', hellip: '…', mdash: '—', ndash: '–', rarr: '→', larr: '←', times: '×' };
  function decode(text) {
    return String(text).replace(/&(#x[0-9a-f]{1,6}|#\d{1,7}|[a-z]+);/gi, (whole, name) => {
      if (name[0] === '#') {
        const point = name[1] === 'x' || name[1] === 'X' ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
        return point > 0 && point <= 0x10ffff && !(point >= 0xd800 && point <= 0xdfff) ? String.fromCodePoint(point) : whole;
      }
      return Object.hasOwn(NAMED, name.toLowerCase()) ? NAMED[name.toLowerCase()] : whole;
    });
  }

  return { render, stats, forget: () => entries.clear() };
})();
