// What the `flue dev` console's Transcript tab shows for a conversation (headless Chromium
// through playwright-core): the text of every stored record row, hook decisions included.
//   node dev_console_transcript.cjs <console url> <agent> <conversation> <expected text> <screenshot>
// Waits until a record row holds <expected text>, then prints one JSON line
// {ok, rows, consoleErrors}.
'use strict';

const { chromium } = require('playwright-core');

const [url, agent, conversation, expected, shot] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
// Every wait is for something the page shows; this deadline only ends a run that would hang.
const TIMEOUT = 120000;

async function main() {
  const consoleErrors = [];
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(TIMEOUT);
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(message.text());
    });
    page.on('pageerror', (error) => consoleErrors.push(String(error)));
    await page.goto(`${url}#${encodeURIComponent(agent)}/${encodeURIComponent(conversation)}`);
    await page.locator('#build.ok').waitFor();
    await page.locator('button[data-tab="transcript"]').click();
    await page.locator('#tab-transcript .record', { hasText: expected }).first().waitFor();
    const rows = await page.locator('#tab-transcript .record').evaluateAll((nodes) =>
      nodes.map((node) => ({ text: node.innerText, error: node.classList.contains('error') })));
    await page.screenshot({ path: shot, fullPage: true });
    console.log(JSON.stringify({ ok: true, rows, consoleErrors }));
  } catch (error) {
    const pages = browser.contexts().flatMap((context) => context.pages());
    const transcript = pages.length
      ? await pages[0].locator('#tab-transcript').innerText().catch(() => '')
      : '';
    console.log(JSON.stringify({ ok: false, error: String(error), transcript, consoleErrors }));
  } finally {
    await browser.close();
  }
}

main();
