// Live tasks in the `flue dev` console (headless Chromium through playwright-core): while two
// parallel tasks each wait in a command reading a FIFO the script controls, the chat shows
// each under its `task` call with what it does now and its tokens, the Timeline tab shows the
// same under its running task steps; the abort button of one task aborts it alone, then the
// other task's FIFO is written and the parent's reply arrives.
//   node dev_console_tasks.cjs <console url> <agent> <conversation> <workspace root> <screenshot>
// Prints one JSON line {ok, chat, timeline, aborted, afterAbort, reply, consoleErrors}.
'use strict';

const fs = require('fs');
const path = require('path');
const { openConsole } = require('./console_page.cjs');

const [url, agent, conversation, root, shot] = process.argv.slice(2);

// Live task rows as data: session, state, what it does, usage (runs in the page).
const liveRows = (nodes) => nodes.map((node) => ({
  session: node.dataset.session,
  state: node.dataset.state,
  doing: (node.querySelector('.live-doing') || {}).innerText || '',
  usage: (node.querySelector('.live-usage') || {}).innerText || '',
  abort: Boolean(node.querySelector('.live-abort')),
}));

async function main() {
  const { browser, page, consoleErrors } = await openConsole({ width: 1400, height: 900 });
  try {
    await page.goto(`${url}#${encodeURIComponent(agent)}/${encodeURIComponent(conversation)}`);
    await page.locator('#build.ok').waitFor();
    const running = '#messages .tool-with-task .live-task[data-state="running"]';
    // Both tasks are inside their command (a `cat` of a FIFO nobody writes yet).
    await page.waitForFunction((selector) => {
      const rows = [...document.querySelectorAll(selector)];
      return rows.length === 2 && rows.every((row) => (row.querySelector('.live-doing') || {}).innerText.startsWith('bash'));
    }, running);
    const chat = await page.locator(running).evaluateAll(liveRows);
    await page.locator('button[data-tab="timeline"]').click();
    await page.locator('#tab-timeline .tl-live .live-task').nth(1).waitFor();
    const timeline = await page.locator('#tab-timeline .tl-live .live-task').evaluateAll(liveRows);
    await page.screenshot({ path: shot, fullPage: false });

    const target = chat.find((row) => row.doing.includes('gate-a'));
    await page.locator(`${running}[data-session="${target.session}"] .live-abort`).click();
    // The aborted task leaves the running ones; the other still runs, still in its command.
    await page.waitForFunction(([selector, session]) => {
      const rows = [...document.querySelectorAll(selector)];
      return rows.length === 1 && rows[0].dataset.session !== session;
    }, [running, target.session]);
    const afterAbort = await page.locator(running).evaluateAll(liveRows);
    // Only now does the other task's command get its line.
    fs.writeFileSync(path.join(root, 'gate-b'), 'b released\n');
    const reply = page.locator('#messages .message.assistant', { hasText: 'Both tasks answered.' });
    await reply.waitFor();
    console.log(JSON.stringify({
      ok: true, chat, timeline, aborted: target.session, afterAbort,
      reply: await reply.innerText(), consoleErrors,
    }));
  } catch (error) {
    const pages = browser.contexts().flatMap((context) => context.pages());
    const messages = pages.length ? await pages[0].locator('#messages').innerText().catch(() => '') : '';
    console.log(JSON.stringify({ ok: false, error: String(error), messages, consoleErrors }));
  } finally {
    await browser.close();
  }
}

main();
