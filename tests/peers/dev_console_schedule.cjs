// Opens the conversation a schedule's tick started on the `flue dev` console (headless Chromium
// through playwright-core) and reads how the tick shows: the signal names its schedule and tick,
// and the agent's reply follows.
//   node dev_console_schedule.cjs <console url> <agent> <conversation> <schedule> <screenshot>
// Prints one JSON line {ok, signal, reply, consoleErrors}.
'use strict';

const { chromium } = require('playwright-core');

const [url, agent, conversation, schedule, shot] = process.argv.slice(2);
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
    const signal = page.locator('.signal', { has: page.locator('.origin', { hasText: `schedule ${schedule}` }) });
    await signal.first().waitFor();
    await page.locator('.message.assistant').first().waitFor();
    const reply = await page.locator('.message.assistant').first().innerText();
    await page.screenshot({ path: shot, fullPage: true });
    const text = await signal.first().innerText();
    console.log(JSON.stringify({ ok: true, signal: text, reply, consoleErrors }));
  } catch (error) {
    console.log(JSON.stringify({ ok: false, error: String(error), consoleErrors }));
  } finally {
    await browser.close();
  }
}

main();
