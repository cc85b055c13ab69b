// Counts how many times a reply's text is on the `flue dev` console page while the reply streams,
// after it settles, and after the conversation is opened again (headless Chromium through
// playwright-core): node dev_console_replies.cjs <console url> <screenshot dir> <release url>
//
// The workspace (written by the Rust test) has four agents on the scripted model, each
// streaming its text a word at a time:
//   plain   one reply
//   tools   a first turn with text and a bash call, then a second turn after the result
//   lead    a first turn with text and a `task` call to the subagent `helper`, then a reply
//   mcp     a first turn with text and a call to server-everything's `echo` (a real MCP server
//           over stdio), then a second turn quoting the result
// Each reply's text starts with a word of its own (the markers below). A MutationObserver in the
// page records, after every change of the chat, how many times each marker is visible
// (`innerText`, what a person sees); the highest count while streaming must be 1. `pieces`
// counts the different sets of the final reply's words seen (more than two: it streamed), and
// `joined` whether the two turns' texts were ever seen run together (`<first>.<second>`).
// Then the agent `flaky`, whose provider fails its first request (503, retry in 2 s) and holds
// the second until the test GETs <release url>: the chat shows `retrying 1 of 3 in 2 s: ...`
// while the call waits, and no longer once the reply streams.
// Last, the agent `offline`, whose provider's server is not running: its failure in the chat
// carries the hint `flue run` prints.
// Prints one JSON line {ok, steps, scenarios: {name: {streaming, pieces, joined, settled,
// reopened}}, retry: {shown, replyWhileWaiting, bothAtOnce, afterSettling}, failure: {error,
// hint}, consoleErrors}.
'use strict';

const path = require('node:path');
const { openConsole, TIMEOUT } = require('./console_page.cjs');

const [url, shots, releaseUrl] = process.argv.slice(2);

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
  { agent: 'mcp', message: 'ask the server',
    markers: ['Asking', 'politely', 'Meerkat', 'verdict', 'Farewell'], lastWord: 'Farewell',
    final: ['Meerkat', 'verdict', 'Farewell'], joined: 'politely.MCP' },
];

// The reply of `flaky` (a recorded real stream): words it has once, and its last word.
const RETRIED = { markers: ['Holiday', 'Potluck', 'Educational', 'Overall'], lastWord: 'connected' };

async function main() {
  const steps = [];
  const results = {};
  let failure = null;
  let retry = null;
  const { browser, page, consoleErrors } = await openConsole({ width: 1280, height: 900 });
  try {
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
    // Opens a new conversation with `agent`, once its live route is connected (a retry is
    // announced there once, when it happens).
    const newConversation = async (agent) => {
      await page.locator('.agent', { has: page.locator('.agent-name', { hasText: new RegExp(`^${agent}$`) }) }).click();
      await page.locator('#chat-agent', { hasText: agent }).waitFor();
      await page.locator('#new-conversation').click();
      await page.locator('.placeholder').waitFor();
      await page.waitForFunction(() => state.liveSource && state.liveSource.readyState === EventSource.OPEN);
    };
    for (const scenario of SCENARIOS) {
      const { agent, message, markers, lastWord, final } = scenario;
      await newConversation(agent);
      // Watch the chat: the highest count of each marker after any change, and the different
      // sets of the final reply's words seen.
      await page.evaluate(({ words, reply, joined }) => {
        const max = Object.fromEntries(words.map((word) => [word, 0]));
        const sets = new Set();
        window.__watch = { max, sets, joined: false };
        const container = document.getElementById('messages');
        const look = () => {
          const text = container.innerText;
          for (const word of words) max[word] = Math.max(max[word], text.split(word).length - 1);
          sets.add(reply.filter((word) => text.includes(word)).join(' '));
          if (joined && text.includes(joined)) window.__watch.joined = true;
        };
        window.__observer = new MutationObserver(look);
        window.__observer.observe(container, { childList: true, subtree: true, characterData: true });
      }, { words: markers, reply: final, joined: scenario.joined || null });
      await page.fill('#input', message);
      await page.press('#input', 'Enter');
      await page.locator('#messages', { hasText: lastWord }).waitFor();
      await settled();
      const watch = await page.evaluate(() => {
        window.__observer.disconnect();
        return { max: window.__watch.max, pieces: window.__watch.sets.size, joined: window.__watch.joined };
      });
      const afterSettle = await visible(markers);
      await page.screenshot({ path: path.join(shots, `${agent}-settled.png`) });
      // Opening the conversation again (a reload keeps it in the url) reads the store.
      await page.reload();
      await page.locator('#chat-agent', { hasText: agent }).waitFor();
      await page.locator('#messages', { hasText: lastWord }).waitFor();
      await settled();
      const reopened = await visible(markers);
      results[agent] = { streaming: watch.max, pieces: watch.pieces, joined: watch.joined, settled: afterSettle, reopened };
      steps.push(agent);
    }

    // A provider call retried: the chat says so while the call waits, and stops saying so once
    // the reply streams.
    await newConversation('flaky');
    await page.evaluate(({ words }) => {
      window.__retry = { bothAtOnce: false };
      const container = document.getElementById('messages');
      const look = () => {
        const text = container.innerText;
        if (container.querySelector('.retry') && words.some((word) => text.includes(word))) window.__retry.bothAtOnce = true;
      };
      window.__retryObserver = new MutationObserver(look);
      window.__retryObserver.observe(container, { childList: true, subtree: true, characterData: true });
    }, { words: RETRIED.markers });
    await page.fill('#input', 'invent a holiday');
    await page.press('#input', 'Enter');
    const note = page.locator('#messages .retry');
    await note.waitFor();
    const shown = await note.innerText();
    const replyWhileWaiting = await visible(RETRIED.markers);
    await page.screenshot({ path: path.join(shots, 'flaky-retrying.png') });
    const released = await fetch(releaseUrl);
    if (!released.ok) throw new Error(`releasing the provider: ${released.status}`);
    await page.locator('#messages', { hasText: RETRIED.lastWord }).waitFor();
    await settled();
    const bothAtOnce = await page.evaluate(() => {
      window.__retryObserver.disconnect();
      return window.__retry.bothAtOnce;
    });
    retry = { shown, replyWhileWaiting, bothAtOnce, afterSettling: await note.count(), reply: await visible(RETRIED.markers) };
    await page.screenshot({ path: path.join(shots, 'flaky-answered.png') });
    steps.push('flaky');

    // A provider that cannot be reached: the failure shows with the hint `flue run` prints.
    await newConversation('offline');
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
    console.log(JSON.stringify({ ok: true, steps, scenarios: results, retry, failure, consoleErrors }));
  } catch (error) {
    console.log(JSON.stringify({ ok: false, steps, scenarios: results, retry, failure, consoleErrors, error: String(error && error.stack || error) }));
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

main();
