// The `flue dev` console at three sizes and over a streaming reply (headless Chromium through
// playwright-core): node dev_console_layout.cjs <console url> <fork conversation> <shots dir>
//
// The workspace (written by the Rust test) has `slow` (a reply with reasoning, a paragraph, a
// table, a code block and 200 words, streamed a piece at a time), `custom` (a custom tool the
// person answers) and `echo`, whose conversation <fork conversation> holds two turns.
//   1280x800  a selection in the streaming reply is still selected, the same element, the
//             opened Thinking block still open and the chat scrolled where it was, once 30 more
//             words have arrived; the chat was not rebuilt; the details panel is widened by dragging its edge; model names are
//             not cut; a code block's copy button copies it; Export saves markdown; a fork
//             opens showing its copied turns, with no "rewind files" (no file changed), and
//             compared with its original side by side; read_file run by hand from the Agent
//             tab, and bash (it asks first) after its confirmation; dark colours when the
//             system asks
//   1024x768  the details panel is a drawer opened from "Details" (with the count of waiting
//             actions); a custom tool's result is typed and sent in the chat itself
//   390x844   no horizontal overflow (document.scrollingElement.scrollWidth <= innerWidth),
//             with a table and a code block in the chat and with each drawer open; the agents
//             are a drawer; no word of the table is broken across lines
// Prints one JSON line {ok, steps, results, consoleErrors}; screenshots <shots>/<step>.png.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { openConsole } = require('./console_page.cjs');

const [url, forkFrom, shots] = process.argv.slice(2);
// The conversation of the streaming reply (the 390 px step opens it again).
const STREAM = `stream-${Date.now().toString(36)}`;

// Fails with `what` and the value seen unless `ok`.
function check(ok, what, seen) {
  if (!ok) throw new Error(`${what}: ${JSON.stringify(seen)}`);
}

// The page's CSP allows no string evaluation: every check run in the page is a function. The
// streaming reply's words are counted as `word<N>` tokens of its text.

async function overflow(page) {
  return page.evaluate(() => ({ scrollWidth: document.scrollingElement.scrollWidth, innerWidth: window.innerWidth }));
}

async function streaming(page, results) {
  await page.goto(`${url}#slow/${STREAM}`);
  await page.locator('#build.ok').waitFor();
  await page.locator('#chat-agent', { hasText: 'slow' }).waitFor();
  await page.fill('#input', 'stream please');
  await page.press('#input', 'Enter');
  await page.locator('.assistant-body > .markdown p', { hasText: 'Alpha paragraph one is complete' }).waitFor();
  await page.waitForFunction((count) => {
    const text = document.querySelector('.message.assistant .assistant-body > .markdown');
    return ((text && text.textContent) || '').split(/\s+/).filter((word) => /^word\d+$/.test(word)).length >= count;
  }, 3);
  await page.locator('.message.assistant details.reasoning > summary').click();
  const before = await page.evaluate(() => {
    const paragraph = [...document.querySelectorAll('.assistant-body > .markdown p')].find((node) => node.textContent.startsWith('Alpha'));
    paragraph.dataset.marked = 'yes';
    const range = document.createRange();
    range.selectNodeContents(paragraph);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    const text = document.querySelector('.message.assistant .assistant-body > .markdown');
    const words = text.textContent.split(/\s+/).filter((word) => /^word\d+$/.test(word)).length;
    return { selected: getSelection().toString(), words, rebuilt: drawStats.rebuilt, draws: drawStats.draws, scrollTop: document.getElementById('messages').scrollTop };
  });
  // 30 more words, 80 ms apart: the reply streamed on for 2.4 s or more.
  await page.waitForFunction((count) => {
    const text = document.querySelector('.message.assistant .assistant-body > .markdown');
    return text.textContent.split(/\s+/).filter((word) => /^word\d+$/.test(word)).length >= count;
  }, before.words + 30);
  const after = await page.evaluate(() => {
    const paragraph = [...document.querySelectorAll('.assistant-body > .markdown p')].find((node) => node.textContent.startsWith('Alpha'));
    const text = document.querySelector('.message.assistant .assistant-body > .markdown');
    return {
      selected: getSelection().toString(),
      sameElement: Boolean(paragraph && paragraph.dataset.marked === 'yes'),
      thinkingOpen: document.querySelector('.message.assistant details.reasoning').open,
      words: text.textContent.split(/\s+/).filter((word) => /^word\d+$/.test(word)).length,
      rebuilt: drawStats.rebuilt,
      draws: drawStats.draws,
      running: !document.getElementById('abort').hidden,
      scrollTop: document.getElementById('messages').scrollTop,
    };
  });
  results.streaming = { before, after };
  check(after.selected === 'Alpha paragraph one is complete and selectable.' && after.selected === before.selected, 'the selection was lost while the reply streamed', results.streaming);
  check(after.sameElement, 'the selected paragraph was drawn again', after);
  check(after.thinkingOpen, 'the opened Thinking block was closed', after);
  check(after.scrollTop === before.scrollTop, 'the chat scrolled while the user selected text', results.streaming);
  check(after.rebuilt === before.rebuilt && after.draws > before.draws, 'the chat was rebuilt while the reply streamed', results.streaming);
  await page.locator('#abort').waitFor({ state: 'hidden' });
  await page.locator('.message.assistant .usage').waitFor();
}

async function wide(page, results) {
  // The details panel widens by dragging its edge.
  const panel = page.locator('#inspector');
  const start = await panel.boundingBox();
  const handle = await page.locator('#inspector-resize').boundingBox();
  await page.mouse.move(handle.x + handle.width / 2, handle.y + 200);
  await page.mouse.down();
  await page.mouse.move(handle.x - 150, handle.y + 210, { steps: 5 });
  await page.mouse.up();
  const widened = await panel.boundingBox();
  results.resized = { before: Math.round(start.width), after: Math.round(widened.width) };
  check(widened.width >= start.width + 140, 'the details panel did not widen', results.resized);
  // Model names are whole (wrapped at a `/` when the column is narrow, never cut).
  const cut = await page.evaluate(() => [...document.querySelectorAll('.agent .badge.model')]
    .filter((badge) => badge.scrollWidth > badge.clientWidth + 1).map((badge) => badge.textContent));
  check(!cut.length, 'model names are cut', cut);
  // A code block's copy button puts its code on the clipboard.
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(url).origin });
  await page.locator('.md-code .md-copy').first().click();
  await page.locator('.md-code .md-copy', { hasText: 'copied' }).waitFor();
  results.copied = await page.evaluate(() => navigator.clipboard.readText());
  check(results.copied.includes('println!("hello");'), 'the code block was not copied', results.copied);
  // Export as markdown.
  await page.locator('#export > summary').click();
  const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#export-markdown').click()]);
  const saved = fs.readFileSync(await download.path(), 'utf8');
  results.exported = { name: download.suggestedFilename(), head: saved.split('\n').slice(0, 5) };
  check(saved.startsWith(`# slow / ${STREAM}`) && saved.includes('## User\n\nstream please') && saved.includes('Alpha paragraph one is complete'), 'the markdown export', results.exported);
}

async function fork(page, results) {
  await page.goto(`${url}?fork#echo/${encodeURIComponent(forkFrom)}`);
  await page.locator('#chat-agent', { hasText: 'echo' }).waitFor();
  await page.locator('.tab-button[data-tab="transcript"]').click();
  const row = page.locator('#tab-transcript .tree-session.root > .record[data-turn="2"]');
  await row.locator('button.fork').click();
  await page.waitForFunction((before) => !window.location.hash.endsWith(`/${before}`), forkFrom);
  await page.locator('.copied-divider').waitFor();
  results.fork = await page.evaluate(() => ({
    bubbles: [...document.querySelectorAll('#messages .message.user .bubble')].map((node) => node.textContent),
    replies: [...document.querySelectorAll('#messages .message.assistant .assistant-body > .markdown')].map((node) => node.textContent.trim()),
    rewindButtons: document.querySelectorAll('.try-rewind, button.rewind').length,
  }));
  check(results.fork.bubbles.join('|') === 'first message' && results.fork.replies.join('|') === 'echo: first message', 'the fork does not show its copied turn', results.fork);
  check(results.fork.rewindButtons === 0, 'rewind is offered though no file changed', results.fork);
  // Compared with its original, side by side: turn 1 is the same, turn 2 only the original has.
  await page.locator('#export > summary').click();
  await page.locator('#compare-open').click();
  await page.locator('.compare-grid').waitFor();
  results.compare = await page.evaluate(() => ({
    heads: [...document.querySelectorAll('.compare-head strong')].map((node) => node.textContent),
    cells: [...document.querySelectorAll('.compare-cell')].map((node) => node.className.replace('compare-cell', '').trim() || 'same'),
  }));
  check(results.compare.heads[1] === forkFrom && results.compare.cells.join(',') === 'same,same,empty,differs', 'the fork compared with its original', results.compare);
  await page.screenshot({ path: path.join(shots, '1280-compare.png') });
  await page.locator('#compare-close').click();
}

// A reply cut off is stored with `interrupted: true` (the protocol's message): drawn with its
// label. (No scripted reply is cut off this way; the message is handed to the page's drawing.)
async function interrupted(page, results) {
  results.interrupted = await page.evaluate(() => {
    state.messages.push({ id: 'cut-1', role: 'assistant', interrupted: true, submissionId: 'none', parts: [{ type: 'text', text: 'Half of a reply' }] });
    renderMessages();
    const shown = document.querySelector('.message.assistant[data-message="cut-1"]');
    return shown ? shown.innerText : null;
  });
  check(results.interrupted && results.interrupted.includes('interrupted') && results.interrupted.includes('Half of a reply'), 'an interrupted reply', results.interrupted);
}

// The Agent tab runs `read_file` by hand, and `bash`, which asks first, once confirmed.
async function byHand(page, results) {
  await page.locator('.tab-button[data-tab="agent"]').click();
  const read = page.locator('#tab-agent [data-run-tool="read_file"]');
  await read.locator('.tool-run-toggle').click();
  await read.locator('textarea').fill('{"path": "echo.json"}');
  await read.locator('.tool-run-go').click();
  const output = read.locator('.tool-run-output');
  await output.waitFor();
  let asked = null;
  page.once('dialog', async (dialog) => { asked = dialog.message(); await dialog.accept(); });
  const bash = page.locator('#tab-agent [data-run-tool="bash"]');
  await bash.locator('.tool-run-toggle').click();
  await bash.locator('textarea').fill('{"command": "echo ran by hand"}');
  await bash.locator('.tool-run-go').click();
  await bash.locator('.tool-run-output').waitFor();
  results.hand = { read: await output.innerText(), asked, ran: await bash.locator('.tool-run-output').innerText() };
  check(results.hand.ran.includes('ran by hand') && asked, 'bash run by hand after its confirmation', results.hand);
  await page.screenshot({ path: path.join(shots, '1280-by-hand.png') });
}

async function dark(page, results) {
  await page.emulateMedia({ colorScheme: 'dark' });
  results.dark = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  check(results.dark === 'rgb(15, 19, 26)', 'the page is not dark when the system asks for it', results.dark);
}

async function drawer(page, results) {
  await page.goto(`${url}#custom/answer-1`);
  await page.locator('#build.ok').waitFor();
  await page.locator('#chat-agent', { hasText: 'custom' }).waitFor();
  check(!(await page.locator('#tab-agent').isVisible()), 'the details panel shows beside the chat at 1024 px', null);
  await page.locator('#inspector-toggle').click();
  await page.locator('#tab-agent', { hasText: 'lookup_order' }).waitFor();
  await page.locator('.tab-button[data-tab="timeline"]').click();
  await page.locator('#tab-timeline').waitFor();
  await page.locator('#inspector-close').click();
  await page.locator('#tab-timeline').waitFor({ state: 'hidden' });
  await page.fill('#input', 'where is my order?');
  await page.press('#input', 'Enter');
  const action = page.locator('#messages .action.pending', { hasText: 'lookup_order' });
  await action.waitFor();
  await page.locator('#inspector-count', { hasText: '1' }).waitFor();
  await page.screenshot({ path: path.join(shots, '1024-pending.png') });
  await action.locator('textarea').fill('{"status": "shipped"}');
  await action.locator('button', { hasText: 'Send result' }).click();
  await page.locator('.assistant-body', { hasText: 'The order is {"status":"shipped"}.' }).waitFor();
  await page.locator('#inspector-count').waitFor({ state: 'hidden' });
  results.answered = await page.locator('#messages .action').last().innerText();
  check(results.answered.includes('custom tool') && !results.answered.includes('approval'), 'the answered custom tool is labelled', results.answered);
}

async function phone(page, results) {
  await page.goto(`${url}#slow/${STREAM}`);
  await page.locator('#build.ok').waitFor();
  await page.locator('.assistant-body > .markdown table').waitFor();
  await page.locator('.message.assistant .usage').waitFor();
  results.phone = { chat: await overflow(page) };
  check(!(await page.locator('#agents').isVisible()), 'the agents show beside the chat at 390 px', null);
  // No word of the table is broken across lines.
  results.phone.brokenWords = await page.evaluate(() => {
    const broken = [];
    for (const cell of document.querySelectorAll('.assistant-body > .markdown table th, .assistant-body > .markdown table td')) {
      const text = cell.firstChild && cell.firstChild.nodeType === Node.TEXT_NODE ? cell.firstChild : null;
      if (!text) continue;
      for (const match of text.data.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(text, match.index);
        range.setEnd(text, match.index + match[0].length);
        if (range.getClientRects().length > 1) broken.push(match[0]);
      }
    }
    return broken;
  });
  check(!results.phone.brokenWords.length, 'table words broken across lines', results.phone.brokenWords);
  await page.locator('.assistant-body > .markdown .md-table').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(shots, '390-chat.png') });
  await page.locator('#sidebar-toggle').click();
  await page.locator('.agent', { hasText: 'custom' }).waitFor();
  // The drawer has slid in.
  await page.waitForFunction(() => document.getElementById('sidebar').getBoundingClientRect().left === 0);
  results.phone.sidebar = await overflow(page);
  await page.screenshot({ path: path.join(shots, '390-agents.png') });
  await page.keyboard.press('Escape');
  await page.locator('#agents').waitFor({ state: 'hidden' });
  await page.locator('#inspector-toggle').click();
  await page.locator('.tab-button[data-tab="transcript"]').click();
  await page.locator('#tab-transcript .record').first().waitFor();
  await page.waitForFunction(() => document.getElementById('inspector').getBoundingClientRect().right === window.innerWidth);
  results.phone.details = await overflow(page);
  await page.screenshot({ path: path.join(shots, '390-details.png') });
  for (const [where, seen] of Object.entries(results.phone)) {
    if (seen.scrollWidth !== undefined) check(seen.scrollWidth <= seen.innerWidth, `the page scrolls sideways at 390 px (${where})`, seen);
  }
}

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  const steps = [];
  const results = {};
  const errors = [];
  const sizes = [
    [{ width: 1280, height: 800 }, async (page) => {
      await streaming(page, results);
      await page.screenshot({ path: path.join(shots, '1280-reply.png') });
      await wide(page, results);
      await fork(page, results);
      await page.screenshot({ path: path.join(shots, '1280-fork.png') });
      await byHand(page, results);
      await interrupted(page, results);
      await dark(page, results);
      await page.screenshot({ path: path.join(shots, '1280-dark.png') });
    }],
    [{ width: 1024, height: 768 }, async (page) => {
      await drawer(page, results);
      await page.screenshot({ path: path.join(shots, '1024-answered.png') });
    }],
    [{ width: 390, height: 844 }, async (page) => phone(page, results)],
  ];
  let failure = null;
  for (const [viewport, run] of sizes) {
    const { browser, page, consoleErrors } = await openConsole(viewport);
    try {
      await run(page);
      steps.push(`${viewport.width}`);
    } catch (error) {
      failure = failure || String(error && error.stack || error);
      await page.screenshot({ path: path.join(shots, `${viewport.width}-failed.png`) }).catch(() => {});
    } finally {
      errors.push(...consoleErrors);
      await browser.close();
    }
    if (failure) break;
  }
  console.log(JSON.stringify({ ok: !failure, steps, results, consoleErrors: errors, error: failure }));
  if (failure) process.exitCode = 1;
}

main();
