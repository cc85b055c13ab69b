// What the `flue dev` console's Transcript tab shows for a conversation (headless Chromium
// through playwright-core): the text of every stored record row, hook decisions included.
//   node dev_console_transcript.cjs <console url> <agent> <conversation> <expected text> <screenshot>
// Waits until a record row holds <expected text>, then prints one JSON line
// {ok, rows, consoleErrors}.
'use strict';

const { openConsole } = require('./console_page.cjs');

const [url, agent, conversation, expected, shot] = process.argv.slice(2);

async function main() {
  const { browser, page, consoleErrors } = await openConsole({ width: 1280, height: 900 });
  try {
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
