// Opens the conversation a schedule's tick started on the `flue dev` console (headless Chromium
// through playwright-core) and reads how the tick shows: the signal names its schedule and tick,
// and the agent's reply follows.
//   node dev_console_schedule.cjs <console url> <agent> <conversation> <schedule> <screenshot>
// Prints one JSON line {ok, signal, reply, consoleErrors}.
'use strict';

const { openConsole } = require('./console_page.cjs');

const [url, agent, conversation, schedule, shot] = process.argv.slice(2);

async function main() {
  const { browser, page, consoleErrors } = await openConsole({ width: 1280, height: 900 });
  try {
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
