// Fork and rewind from the `flue dev` console (headless Chromium through playwright-core): in
// the Transcript tab, "rewind files" on a user message (its confirmation accepted) rewinds the
// workspace, then "fork here" on it opens the new conversation.
//   node dev_console_history.cjs <console url> <agent> <conversation> <turn> <screenshot>
// Prints one JSON line {ok, rewound, dialog, opened, consoleErrors}.
'use strict';

const { openConsole } = require('./console_page.cjs');

const [url, agent, conversation, turn, shot] = process.argv.slice(2);

async function main() {
  const { browser, page, consoleErrors } = await openConsole({ width: 1280, height: 900 });
  try {
    let dialog = '';
    page.on('dialog', async (shown) => {
      dialog = shown.message();
      await shown.accept();
    });
    await page.goto(`${url}#${encodeURIComponent(agent)}/${encodeURIComponent(conversation)}`);
    await page.locator('#build.ok').waitFor();
    await page.locator('button[data-tab="transcript"]').click();
    const row = page.locator(`#tab-transcript .tree-session.root > .record[data-turn="${turn}"]`);
    await row.locator('button.rewind').click();
    await page.locator('#run-state', { hasText: 'Rewound' }).waitFor();
    const rewound = await page.locator('#run-state').innerText();
    await row.locator('button.fork').click();
    const original = `#${encodeURIComponent(agent)}/${encodeURIComponent(conversation)}`;
    await page.waitForFunction((before) => window.location.hash !== before, original);
    const opened = decodeURIComponent(await page.evaluate(() => window.location.hash));
    await page.screenshot({ path: shot, fullPage: true });
    console.log(JSON.stringify({ ok: true, rewound, dialog, opened, consoleErrors }));
  } catch (error) {
    const pages = browser.contexts().flatMap((context) => context.pages());
    const transcript = pages.length
      ? await pages[0].locator('#tab-transcript').innerHTML().catch(() => '')
      : '';
    console.log(JSON.stringify({ ok: false, error: String(error), transcript, consoleErrors }));
  } finally {
    await browser.close();
  }
}

main();
