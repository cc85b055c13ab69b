// The console's conversation list and its access modes, in headless Chromium (playwright-core
// with the system browser):
//   node dev_console_list.cjs list <console url> <screenshot dir> <conversations>
//     (`flue dev` holding that many conversations, one of them helper/invoice-1 about ACME)
//     the list shows every conversation with its status and first message; a search filters
//     it on the server; opening a row loads that conversation; a conversation started
//     meanwhile appears in the open list and settles there.
//   node dev_console_list.cjs more <console url> <screenshot dir> <conversations>
//     (`flue dev` holding more conversations than a page) the list shows the first page and
//     "Show older"; clicking it appends the next page until none is left; a conversation
//     started meanwhile comes on top with every older row still shown once.
//   node dev_console_list.cjs read-only <console url> <screenshot dir> <agent> <conversation>
//     (`flue serve --console` without a token) the page says read-only and shows no control
//     that changes something; the list and the conversation show; a write the page sends
//     anyway is refused (403 read_only).
//   node dev_console_list.cjs token <console url> <screenshot dir> <token>
//     (`flue serve --console --token`) the page asks for the token; with it, a message sent
//     from the composer gets its reply (the stream read with the token), and the token is in
//     no URL.
// Prints one JSON line {ok, ...results, consoleErrors} and exits 0 only when it ran through.
'use strict';

const path = require('node:path');
const { openConsole, TIMEOUT } = require('./console_page.cjs');

const [mode, url, shots, ...rest] = process.argv.slice(2);

async function rows(page) {
  return page.locator('#list-rows tr').evaluateAll((trs) => trs.map((tr) => ({
    agent: tr.dataset.agent,
    id: tr.dataset.id,
    status: tr.querySelector('.list-status').textContent,
    first: tr.querySelector('.list-first').textContent,
    turns: tr.querySelectorAll('td')[5].textContent,
  })));
}

async function waitRows(page, predicate) {
  await page.waitForFunction(predicate, null, { timeout: TIMEOUT, polling: 50 });
  return rows(page);
}

async function listMode(page, out) {
  const n = Number(rest[0]);
  const count = (expected) => page.waitForFunction(
    (expected) => document.querySelectorAll('#list-rows tr').length === expected, expected,
    { timeout: TIMEOUT, polling: 50 });
  await page.goto(url);
  await page.locator('#build.ok').waitFor();
  await page.locator('#list-toggle').click();
  await count(n);
  out.all = await rows(page);
  out.count = await page.locator('#list-count').innerText();

  await page.locator('#list-search').fill('INVOICE acme');
  out.searched = await waitRows(page, () => document.querySelectorAll('#list-rows tr').length === 1);
  await page.locator('#list-rows tr').first().click();
  await page.locator('#conversation-list').waitFor({ state: 'hidden' });
  await page.locator('.message.assistant').first().waitFor();
  out.opened = {
    conversation: await page.locator('#conversation').inputValue(),
    agent: await page.locator('#chat-agent').innerText(),
    reply: await page.locator('.message.assistant').first().innerText(),
    hash: new URL(page.url()).hash,
  };

  // The list follows what happens while it is open.
  await page.locator('#list-toggle').click();
  await page.locator('#list-search').fill('');
  await count(n);
  out.posted = await page.evaluate(async () => {
    const response = await fetch('/agents/writer/launch-plan', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'user', body: 'Plan the launch party' }),
    });
    return response.status;
  });
  out.live = await waitRows(page, () => {
    const row = document.querySelector('#list-rows tr[data-id="launch-plan"] .list-status');
    return row && row.textContent === 'settled';
  });
  await page.locator('#list-search').fill('');
  await page.mouse.move(0, 0);
  await page.screenshot({ path: path.join(shots, 'console-list.png') });
}

async function moreMode(page, out) {
  const n = Number(rest[0]);
  const count = (expected) => page.waitForFunction(
    (expected) => document.querySelectorAll('#list-rows tr').length === expected, expected,
    { timeout: TIMEOUT, polling: 50 });
  await page.goto(url);
  await page.locator('#build.ok').waitFor();
  await page.locator('#list-toggle').click();
  await page.waitForFunction(() => document.querySelectorAll('#list-rows tr').length > 0,
    null, { timeout: TIMEOUT, polling: 50 });
  out.firstPage = (await rows(page)).length;
  out.firstCount = await page.locator('#list-count').innerText();
  out.moreShown = await page.locator('#list-more').isVisible();
  out.clicks = 0;
  while (await page.locator('#list-more').isVisible()) {
    const before = (await rows(page)).length;
    await page.locator('#list-more').click();
    out.clicks += 1;
    await page.waitForFunction(
      (before) => document.querySelectorAll('#list-rows tr').length > before
        || document.getElementById('list-foot').hidden,
      before, { timeout: TIMEOUT, polling: 50 });
    await page.waitForFunction(() => !document.getElementById('list-more').disabled,
      null, { timeout: TIMEOUT, polling: 50 });
  }
  out.all = (await rows(page)).map((row) => row.id);
  out.count = await page.locator('#list-count').innerText();
  out.posted = await page.evaluate(async () => {
    const response = await fetch('/agents/writer/late-one', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'user', body: 'A late one' }),
    });
    return response.status;
  });
  await count(n + 1);
  await waitRows(page, () => {
    const row = document.querySelector('#list-rows tr[data-id="late-one"] .list-status');
    return row && row.textContent === 'settled';
  });
  out.live = (await rows(page)).map((row) => row.id);
}

async function readOnlyMode(page, out) {
  const [agent, conversation] = rest;
  await page.goto(`${url}#${encodeURIComponent(agent)}/${encodeURIComponent(conversation)}`);
  await page.locator('body.read-only').waitFor();
  await page.locator('.message.assistant').first().waitFor();
  out.reply = await page.locator('.message.assistant').first().innerText();
  out.visible = {};
  for (const selector of ['#composer', '#abort', '#new-conversation', '#input', '#send']) {
    out.visible[selector] = await page.locator(selector).isVisible();
  }
  out.transcriptTab = await page.locator('[data-tab="transcript"]').isVisible();
  // The Agent tab reads the agent's tools from the server (the same views as flue dev's).
  await page.locator('#tab-agent .tool-row').first().waitFor();
  out.agentTools = await page.locator('#tab-agent .tool-row').evaluateAll((rows) => rows.map((row) => row.dataset.tool));
  await page.screenshot({ path: path.join(shots, 'console-read-only.png') });
  await page.locator('#list-toggle').click();
  out.rows = await waitRows(page, () => document.querySelectorAll('#list-rows tr').length >= 1);
  out.write = await page.evaluate(async ([agent, conversation]) => {
    const response = await fetch(`/agents/${agent}/${conversation}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'user', body: 'sent from the page anyway' }),
    });
    return { status: response.status, body: await response.json() };
  }, [agent, conversation]);
  out.abort = await page.evaluate(async ([agent, conversation]) => {
    const response = await fetch(`/agents/${agent}/${conversation}/abort`, { method: 'POST' });
    return response.status;
  }, [agent, conversation]);
}

async function tokenMode(page, out, consoleErrors) {
  const [token] = rest;
  await page.goto(url);
  await page.locator('.token-dialog').waitFor();
  out.asked = await page.locator('.token-dialog').innerText();
  await page.locator('#token-input').fill(token);
  // The page reloads with the token; errors of the first load (the 401s that made it ask)
  // are not the page's.
  await Promise.all([
    page.waitForNavigation(),
    page.locator('.token-dialog button').click(),
  ]);
  consoleErrors.length = 0;
  await page.locator('#build.ok').waitFor();
  out.composerVisible = await page.locator('#composer').isVisible();
  await page.locator('#input').fill('Hello with the token');
  await page.locator('#send').click();
  await page.locator('.message.assistant').first().waitFor();
  await page.waitForFunction(() => !document.querySelector('#abort') || document.querySelector('#abort').hidden);
  out.reply = await page.locator('.message.assistant').first().innerText();
  out.url = page.url();
  out.stored = await page.evaluate(() => Object.keys(sessionStorage));
  await page.locator('#list-toggle').click();
  out.rows = await waitRows(page, () => {
    const row = document.querySelector('#list-rows tr .list-status');
    return row && row.textContent === 'settled';
  });
  await page.screenshot({ path: path.join(shots, 'console-token.png') });
}

async function main() {
  const requests = [];
  const out = { ok: false };
  const { browser, page, consoleErrors } = await openConsole({ width: 1280, height: 720 });
  try {
    page.on('request', (request) => requests.push(request.url()));
    if (mode === 'list') await listMode(page, out);
    else if (mode === 'more') await moreMode(page, out);
    else if (mode === 'read-only') await readOnlyMode(page, out);
    else if (mode === 'token') await tokenMode(page, out, consoleErrors);
    else throw new Error(`unknown mode ${mode}`);
    out.requestUrls = requests;
    out.ok = true;
  } catch (error) {
    out.error = String(error);
  } finally {
    await browser.close();
  }
  out.consoleErrors = consoleErrors;
  console.log(JSON.stringify(out));
}

main();
