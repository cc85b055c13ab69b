// Counts how many times a reply's text is on the `flue dev` console page while the reply streams,
// after it settles, and after the conversation is opened again (headless Chromium through
// playwright-core): node dev_console_replies.cjs <console url> <screenshot dir>
//
// The workspace (written by the Rust test) has three agents on the scripted model, each
// streaming its text a word at a time:
//   plain   one reply
//   tools   a first turn with text and a bash call, then a second turn after the result
//   lead    a first turn with text and a `task` call to the subagent `helper`, then a reply
// Each reply's text starts with a word of its own (the markers below). A MutationObserver in the
// page records, after every change of the chat, how many times each marker is visible
// (`innerText`, what a person sees); the highest count while streaming must be 1. `pieces`
// counts the different sets of the final reply's words seen (more than two: it streamed).
// Last, the agent `offline`, whose provider's server is not running: its failure in the chat
// carries the hint `flue run` prints.
// Prints one JSON line {ok, steps, scenarios: {name: {streaming, pieces, settled, reopened}},
// failure: {error, hint}, consoleErrors}.
'use strict';

const path = require('node:path');
const { chromium } = require('playwright-core');

const [url, shots] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = 30000;

// Per agent: the message to send, the markers (every word of the streamed texts that appears
// nowhere else on the page), the last word of the final reply (it is complete once that
// shows) and the final reply's words.
const SCENARIOS = [
  { agent: 'plain', message: 'tell me about zebras',
    markers: ['Zebra', 'crossings', 'striped', 'visibility'], lastWord: 'visibility',
    final: ['Zebra', 'crossings', 'striped', 'visibility'] },
  { agent: 'tools', message: 'run something',
    markers: ['Asking', 'oracle', 'gently', 'Walrus', 'report', 'printed', 'Goodbye'], lastWord: 'Goodbye',
    final: ['Walrus', 'report', 'printed', 'Goodbye'] },
  { agent: 'lead', message: 'delegate it',
    markers: ['Handing', 'trusty', 'Quokka', 'summary', 'finished', 'nicely', 'Narwhal', 'counted'], lastWord: 'nicely',
    final: ['Quokka', 'summary', 'finished', 'nicely'] },
];

async function main() {
  const steps = [];
  const consoleErrors = [];
  const results = {};
  let failure = null;
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
    // How many times each marker is visible in the chat now.
    const visible = (markers) => page.evaluate((words) => {
      const text = document.getElementById('messages').innerText;
      return Object.fromEntries(words.map((word) => [word, text.split(word).length - 1]));
    }, markers);
    // The reply settled: its usage line is shown (read from the store after the settlement)
    // and nothing runs.
    const settled = async () => {
      await page.locator('.message.assistant .usage').last().waitFor();
      await page.locator('#abort').waitFor({ state: 'hidden' });
    };

    await page.goto(url);
    await page.locator('#build.ok').waitFor();
    for (const scenario of SCENARIOS) {
      const { agent, message, markers, lastWord, final } = scenario;
      await page.locator('.agent', { has: page.locator('.agent-name', { hasText: new RegExp(`^${agent}$`) }) }).click();
      await page.locator('#chat-agent', { hasText: agent }).waitFor();
      await page.locator('#new-conversation').click();
      await page.locator('.placeholder').waitFor();
      // Watch the chat: the highest count of each marker after any change, and the different
      // sets of the final reply's words seen.
      await page.evaluate(({ words, reply }) => {
        const max = Object.fromEntries(words.map((word) => [word, 0]));
        const sets = new Set();
        window.__watch = { max, sets };
        const container = document.getElementById('messages');
        const look = () => {
          const text = container.innerText;
          for (const word of words) max[word] = Math.max(max[word], text.split(word).length - 1);
          sets.add(reply.filter((word) => text.includes(word)).join(' '));
        };
        window.__observer = new MutationObserver(look);
        window.__observer.observe(container, { childList: true, subtree: true, characterData: true });
      }, { words: markers, reply: final });
      await page.fill('#input', message);
      await page.press('#input', 'Enter');
      await page.locator('#messages', { hasText: lastWord }).waitFor();
      await settled();
      const watch = await page.evaluate(() => {
        window.__observer.disconnect();
        return { max: window.__watch.max, pieces: window.__watch.sets.size };
      });
      const afterSettle = await visible(markers);
      await page.screenshot({ path: path.join(shots, `${agent}-settled.png`) });
      // Opening the conversation again (a reload keeps it in the url) reads the store.
      await page.reload();
      await page.locator('#chat-agent', { hasText: agent }).waitFor();
      await page.locator('#messages', { hasText: lastWord }).waitFor();
      await settled();
      const reopened = await visible(markers);
      results[agent] = { streaming: watch.max, pieces: watch.pieces, settled: afterSettle, reopened };
      steps.push(agent);
    }

    // A provider that cannot be reached: the failure shows with the hint `flue run` prints.
    await page.locator('.agent', { has: page.locator('.agent-name', { hasText: /^offline$/ }) }).click();
    await page.locator('#chat-agent', { hasText: 'offline' }).waitFor();
    await page.locator('#new-conversation').click();
    await page.fill('#input', 'hello?');
    await page.press('#input', 'Enter');
    const advisory = page.locator('.advisory', { hasText: 'cannot reach' });
    await advisory.waitFor();
    await advisory.locator('.hint').waitFor();
    failure = {
      error: await advisory.evaluate((el) => el.firstChild.nextSibling.textContent),
      hint: await advisory.locator('.hint').innerText(),
    };
    await page.screenshot({ path: path.join(shots, 'offline-failed.png') });
    steps.push('offline');
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
    console.log(JSON.stringify({ ok: true, steps, scenarios: results, failure, consoleErrors }));
  } catch (error) {
    console.log(JSON.stringify({ ok: false, steps, scenarios: results, failure, consoleErrors, error: String(error && error.stack || error) }));
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

main();
