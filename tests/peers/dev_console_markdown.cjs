// Markdown in replies and the Agent tab of the `flue dev` console, in headless Chromium
// (playwright-core with the system browser):
//   node dev_console_markdown.cjs <console url> <screenshot dir>
//
// The workspace (written by the Rust test, dev.rs) has agents on the scripted model:
//   md      streams a reply with every construct: headings, lists, a task list, code blocks in
//           Rust and Python, a table, links, a quote, emphasis
//   hostile streams a reply made to run script in the page: <script>, <img onerror>,
//           javascript: links, <iframe>, <svg onload>, an image from the network; and
//           bidirectional overrides and isolates that would show its text reordered
//   long    streams a reply of more than 50 KB, a word at a time
//   studio  has built-in, command and MCP tools (server-everything over stdio), a tool that
//           always asks, a skill, a subagent and a role: its Agent tab is looked at
// Checks what the page shows (elements, not HTML text), that nothing of the hostile reply ran
// (a window flag stays unset, no such element exists, no request left the console's server),
// that the reply text is on the page once while it streams, and measures the rendering of the
// long reply while it grows (characters handed to the markdown lexer, and time).
// Prints one JSON line {ok, steps, markdown, hostile, long, agentTab, csp, consoleErrors}.
'use strict';

const path = require('node:path');
const { openConsole, TIMEOUT } = require('./console_page.cjs');

const [url, shots] = process.argv.slice(2);

async function main() {
  const steps = [];
  const result = {};
  const origin = new URL(url).origin;
  const foreignRequests = [];
  const { browser, page, consoleErrors } = await openConsole({ width: 1360, height: 900 });
  try {
    page.on('request', (request) => {
      const target = request.url();
      if (!target.startsWith(origin) && !target.startsWith('data:')) foreignRequests.push(target);
    });
    const shot = (name) => page.screenshot({ path: path.join(shots, `${name}.png`) });
    const response = await page.goto(url);
    result.csp = response.headers()['content-security-policy'];
    await page.locator('#build.ok').waitFor();

    const newConversation = async (agent) => {
      await page.locator('.agent', { has: page.locator('.agent-name', { hasText: new RegExp(`^${agent}$`) }) }).click();
      await page.locator('#chat-agent', { hasText: agent }).waitFor();
      await page.locator('#new-conversation').click();
      await page.locator('.placeholder').waitFor();
    };
    const settled = async () => {
      await page.locator('.message.assistant .usage').last().waitFor();
      await page.locator('#abort').waitFor({ state: 'hidden' });
    };
    // Counts, after every change of the chat, how many times `word` is in it; the highest
    // (textContent: reading innerText would lay the page out at every change).
    const watch = (word) => page.evaluate((marker) => {
      window.__most = 0;
      const container = document.getElementById('messages');
      window.__observer = new MutationObserver(() => {
        window.__most = Math.max(window.__most, container.textContent.split(marker).length - 1);
      });
      window.__observer.observe(container, { childList: true, subtree: true, characterData: true });
    }, word);
    const most = () => page.evaluate(() => { window.__observer.disconnect(); return window.__most; });
    const send = async (text) => {
      await page.fill('#input', text);
      await page.press('#input', 'Enter');
    };

    // 1. Every construct renders as its elements, streamed, and the text is there once.
    await newConversation('md');
    await watch('Aardvark');
    await send('show me markdown');
    await page.locator('.message.assistant .markdown', { hasText: 'Finished rendering' }).waitFor();
    await settled();
    const reply = page.locator('.message.assistant .markdown').last();
    result.markdown = await reply.evaluate((root) => {
      const count = (selector) => root.querySelectorAll(selector).length;
      const link = root.querySelector('a[href^="https://"]');
      const mail = root.querySelector('a[href^="mailto:"]');
      return {
        h1: count('h1'), h2: count('h2'), h3: count('h3'),
        ulItems: count('ul > li'), olItems: count('ol > li'), olStart: root.querySelector('ol') && root.querySelector('ol').getAttribute('start'),
        tasks: count('ul.md-tasks input[type=checkbox][disabled]'), checked: count('ul.md-tasks input[type=checkbox]:checked'),
        tableHead: [...root.querySelectorAll('table thead th')].map((cell) => cell.textContent),
        tableRows: count('table tbody tr'), rightAligned: count('td.md-align-right'),
        codeBlocks: [...root.querySelectorAll('.md-code')].map((block) => ({
          lang: block.querySelector('.md-code-lang') && block.querySelector('.md-code-lang').textContent,
          keywords: [...block.querySelectorAll('.token.keyword')].map((token) => token.textContent),
          strings: block.querySelectorAll('.token.string').length,
          text: block.querySelector('pre').textContent,
        })),
        inlineCode: [...root.querySelectorAll('p code')].map((node) => node.textContent),
        strong: count('strong'), em: count('em'), del: count('del'), quote: root.querySelector('blockquote') && root.querySelector('blockquote').textContent.trim(),
        link: link && { href: link.getAttribute('href'), text: link.textContent, rel: link.getAttribute('rel'), target: link.getAttribute('target') },
        mail: mail && mail.getAttribute('href'),
        hr: count('hr'),
        entity: root.innerText.includes('fish & chips'),
      };
    });
    result.markdown.mostAardvark = await most();
    await reply.scrollIntoViewIfNeeded();
    await shot('markdown');
    steps.push('markdown');

    // 2. A reply made to run script runs nothing and loads nothing.
    await newConversation('hostile');
    // The user's own text, with a right-to-left override.
    await send('attack \u202Ekcatta');
    await page.locator('.message.assistant .markdown', { hasText: 'End of attempts' }).waitFor();
    await settled();
    const hostile = page.locator('.message.assistant .markdown').last();
    result.hostile = await hostile.evaluate((root) => ({
      pwned: window.__pwned === undefined ? null : window.__pwned,
      dangerous: [...document.querySelectorAll('#messages script, #messages iframe, #messages img, #messages object, #messages embed, #messages svg, #messages style, #messages form, #messages [onerror], #messages [onload], #messages [onclick], #messages [style]')].map((node) => node.outerHTML),
      anchors: [...document.querySelectorAll('#messages a')].map((anchor) => ({ href: anchor.getAttribute('href'), rel: anchor.getAttribute('rel'), target: anchor.getAttribute('target') })),
      shownAsText: ['<script>', '<img src=x onerror=', '<iframe', '<svg onload='].filter((text) => root.innerText.includes(text)),
      unlinked: [...root.querySelectorAll('.md-unlinked')].map((node) => node.textContent),
      image: [...root.querySelectorAll('.md-image')].map((node) => ({ tag: node.tagName, text: node.textContent })),
      // Bidirectional controls left anywhere in the chat (none should be), and how each
      // reordering the reply and the message tried is shown.
      rawBidi: [...document.getElementById('messages').textContent.matchAll(/[\u202A-\u202E\u2066-\u2069]/g)].map((match) => match[0].codePointAt(0).toString(16)),
      bidiShown: ['invoice_\\u{202e}fdp.exe', 'run \\u{2067}evil\\u{2069} now', '\\u{202d}forced\\u{202c}', 'attack \\u{202e}kcatta']
        .filter((text) => document.getElementById('messages').textContent.includes(text)),
    }));
    // Clicking what looks like the javascript: link runs nothing either.
    await hostile.locator('.md-unlinked', { hasText: 'click me' }).first().click();
    // Writing HTML strings into the page fails (Trusted Types, from the CSP).
    const errorsBefore = consoleErrors.length;
    result.hostile.htmlSinkBlocked = await page.evaluate(() => {
      try { document.createElement('div').innerHTML = '<b>x</b>'; return false; } catch { return true; }
    });
    // That refusal is reported on the console too: expected, not an error of the page.
    for (let idx = consoleErrors.length - 1; idx >= errorsBefore; idx -= 1) {
      if (consoleErrors[idx].includes("requires 'TrustedHTML' assignment")) consoleErrors.splice(idx, 1);
    }
    result.hostile.pwnedAfterClick = await page.evaluate(() => (window.__pwned === undefined ? null : window.__pwned));
    await hostile.scrollIntoViewIfNeeded();
    await shot('hostile');
    steps.push('hostile');

    // 3. A reply of more than 50 KB streams a word at a time: shown once, fast, and its
    // rendering is not redone from the start at each word.
    await newConversation('long');
    await watch('Zeppelin');
    const lexedBefore = await page.evaluate(() => flueMarkdown.stats.lexed);
    const started = Date.now();
    await send('write a lot');
    await page.locator('.message.assistant .markdown', { hasText: 'Finale' }).waitFor();
    const streamedMs = Date.now() - started;
    await settled();
    const mostZeppelin = await most();
    const streamLexed = await page.evaluate((before) => flueMarkdown.stats.lexed - before, lexedBefore);
    result.long = await page.evaluate(() => {
      const message = state.messages.filter((entry) => entry.role === 'assistant').pop();
      const text = message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');
      const shown = document.querySelector('.message.assistant .markdown');
      // The same text growing a word at a time (as the scripted model streams it), rendered
      // the way the chat renders it.
      const pieces = text.match(/\s*\S+\s*/g) || [];
      // Grows the first `count` pieces a piece at a time; what the lexer was handed, and ms.
      const grow = (count, key) => {
        const before = flueMarkdown.stats.lexed;
        const t0 = performance.now();
        let grown = '';
        let out = null;
        for (const piece of pieces.slice(0, count)) {
          grown += piece;
          out = flueMarkdown.render(grown, key);
        }
        return { lexed: flueMarkdown.stats.lexed - before, ms: performance.now() - t0, out };
      };
      const half = grow(Math.floor(pieces.length / 2), 'measure:half');
      const full = grow(pieces.length, 'measure:full');
      const out = full.out;
      const incrementalMs = full.ms;
      const lexed = full.lexed;
      const t1 = performance.now();
      flueMarkdown.render(text);
      const onceMs = performance.now() - t1;
      return {
        chars: text.length, updates: pieces.length, lexed, incrementalMs: Math.round(incrementalMs), onceMs: Math.round(onceMs),
        halfChars: pieces.slice(0, Math.floor(pieces.length / 2)).join('').length, halfLexed: half.lexed, halfMs: Math.round(half.ms),
        // What rendering from scratch at each update would hand the lexer.
        fromScratch: pieces.reduce((acc, piece) => ({ len: acc.len + piece.length, sum: acc.sum + acc.len + piece.length }), { len: 0, sum: 0 }).sum,
        sameAsOnce: out.textContent === flueMarkdown.render(text).textContent,
        sections: shown.querySelectorAll('h2').length,
        tables: shown.querySelectorAll('table').length,
      };
    });
    result.long.streamedMs = streamedMs;
    result.long.streamLexed = streamLexed;
    result.long.mostZeppelin = mostZeppelin;
    steps.push('long');

    // 4. The Agent tab: every tool with its policy; skills, subagents and roles open their
    // files.
    await page.locator('.agent', { has: page.locator('.agent-name', { hasText: /^studio$/ }) }).click();
    await page.locator('#chat-agent', { hasText: 'studio' }).waitFor();
    const tab = page.locator('#tab-agent');
    await tab.locator('[data-tool="mcp__everything__echo"]').waitFor();
    result.agentTab = await tab.evaluate((root) => ({
      tools: [...root.querySelectorAll('.tool-row')].map((row) => ({
        name: row.dataset.tool, origin: row.dataset.origin, policy: row.dataset.policy,
        badge: row.querySelector('.badge').textContent,
      })),
      links: [...root.querySelectorAll('[data-source]')].map((link) => link.dataset.source),
    }));
    // Tall enough to show the whole list.
    await page.setViewportSize({ width: 1360, height: 1900 });
    await shot('agent-tab');
    await page.setViewportSize({ width: 1360, height: 900 });
    await tab.locator('[data-source="skill/haiku"]').click();
    await tab.locator('.source-text', { hasText: 'Write a haiku' }).waitFor();
    result.agentTab.skill = await tab.locator('.source-text').getAttribute('data-path');
    await shot('agent-source');
    await tab.locator('.source-back').click();
    await tab.locator('[data-source="agent/helper"]').click();
    await tab.locator('.source-text', { hasText: 'You help.' }).waitFor();
    result.agentTab.subagent = await tab.locator('.source-text').getAttribute('data-path');
    await tab.locator('.source-back').click();
    await tab.locator('[data-source="role/critic"]').first().click();
    await tab.locator('.source-text', { hasText: 'You criticise' }).waitFor();
    result.agentTab.role = await tab.locator('.source-text').getAttribute('data-path');
    steps.push('agent-tab');

    result.foreignRequests = foreignRequests;
    console.log(JSON.stringify({ ok: true, steps, ...result, consoleErrors }));
  } catch (error) {
    console.log(JSON.stringify({ ok: false, steps, error: String(error && error.stack || error), ...result, foreignRequests, consoleErrors }));
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

main();
