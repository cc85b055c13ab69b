// The Evals tab of the `flue dev` console, in headless Chromium (playwright-core with the
// system browser):
//   node dev_console_evals.cjs <console url> <screenshot dir>
//
// The workspace (written by the Rust test, eval.rs) holds two runs of `flue eval` on the
// scripted model, the second with the first as its baseline; one case fails an assertion and
// a judge. Opens the tab, reads the newest run's summary and cases as shown, then clicks the
// failing case's "Open conversation" and reads the chat it opens.
// Prints one JSON line {ok, runs, summary, cases, opened, csp, consoleErrors}.
'use strict';

const path = require('node:path');
const { openConsole } = require('./console_page.cjs');

const [url, shots] = process.argv.slice(2);

async function main() {
  const result = {};
  const { browser, page, consoleErrors } = await openConsole({ width: 1360, height: 900 });
  try {
    const response = await page.goto(url);
    result.csp = response.headers()['content-security-policy'];
    await page.locator('#build.ok').waitFor();
    await page.locator('.tab-button[data-tab="evals"]').click();
    await page.locator('#eval-cases .ev-case').first().waitFor();
    result.runs = await page.locator('#eval-run option').count();
    result.summary = await page.locator('#eval-summary tbody tr').evaluateAll((rows) =>
      rows.map((row) => Array.from(row.cells, (cell) => cell.textContent)));
    result.cases = await page.locator('#eval-cases .ev-case').evaluateAll((cards) => cards.map((card) => ({
      case: card.dataset.case,
      verdict: card.querySelector('.ev-verdict').textContent,
      failed: Array.from(card.querySelectorAll('.ev-failed'), (line) => line.querySelector('.ev-check-name').textContent + ': ' + (line.querySelector('.ev-detail') || { textContent: '' }).textContent),
      reasoning: Array.from(card.querySelectorAll('.ev-reasoning'), (line) => line.textContent),
      conversation: card.querySelector('.ev-open').title,
    })));
    await page.screenshot({ path: path.join(shots, 'evals-tab.png') });
    const failing = page.locator('#eval-cases .ev-case.ev-fail').first();
    await failing.locator('.ev-open').click();
    const [agent, conversation] = (await failing.locator('.ev-open').getAttribute('title')).split(' / ');
    await page.locator('#chat-agent', { hasText: agent }).waitFor();
    await page.waitForFunction((id) => document.getElementById('conversation').value === id, conversation);
    await page.locator('.message.assistant').first().waitFor();
    result.opened = {
      agent: await page.locator('#chat-agent').textContent(),
      conversation: await page.locator('#conversation').inputValue(),
      hash: await page.evaluate(() => location.hash),
      user: await page.locator('.message.user').first().textContent(),
      assistant: await page.locator('.message.assistant').first().textContent(),
    };
    await page.screenshot({ path: path.join(shots, 'evals-opened.png') });
    result.ok = true;
  } catch (error) {
    result.ok = false;
    result.error = String(error && error.stack || error);
    await page.screenshot({ path: path.join(shots, 'evals-failure.png') }).catch(() => {});
  } finally {
    result.consoleErrors = consoleErrors;
    await browser.close();
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main();
