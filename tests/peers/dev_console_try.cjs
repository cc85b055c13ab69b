// Trying without editing files in the `flue dev` console (headless Chromium through
// playwright-core): the composer sends a message that creates a file, then one with another
// model, a thinking level and a role, runs a skill with arguments, sends a signal; then, on
// the messages, retry (the same message and choices again), a failed message's retry, rewind
// files (its confirmation accepted) and undo, and fork from here.
//   node dev_console_try.cjs <console url> <agent> <conversation> <screenshot>
// Prints one JSON line {ok, replies, badges, dialog, rewound, undone, failures, opened,
// consoleErrors}.
'use strict';

const { openConsole } = require('./console_page.cjs');

const [url, agent, conversation, shot] = process.argv.slice(2);

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
    await page.locator('#try-model option[value="scripted/other.json"]').waitFor({ state: 'attached' });

    const replies = page.locator('.message.assistant .assistant-body');
    const idle = () => page.waitForFunction(() => document.querySelector('#abort').hidden
      && document.querySelectorAll('.typing').length === 0);
    const sendText = async (text) => {
      await page.locator('#input').fill(text);
      await page.locator('#send').click();
    };
    const lastReply = async (count) => {
      await page.waitForFunction((n) => document.querySelectorAll('.message.assistant').length >= n, count);
      await idle();
      return replies.nth(count - 1).innerText();
    };

    // 0. A choice the agent does not have (a role deleted since the page loaded) is refused
    // with the reason under the message box, and nothing is sent.
    await page.evaluate(() => {
      const option = document.createElement('option');
      option.value = 'captain';
      option.textContent = 'captain';
      document.querySelector('#try-role').append(option);
    });
    await page.locator('#try-role').selectOption('captain');
    await sendText('ahoy');
    await page.locator('#run-state.error', { hasText: '`role`' }).waitFor();
    const refused = await page.locator('#run-state').innerText();
    // The browser reports the refused request (400) as a console error: expected here only.
    const unexpected = consoleErrors.filter((text) => !text.includes('status of 400'));
    consoleErrors.length = 0;
    consoleErrors.push(...unexpected);
    await page.locator('#try-role').selectOption('');
    // 1. A plain message that creates a file (rewound later).
    await sendText('create a');
    const created = await lastReply(1);
    // 2. Another model, a thinking level and a role, for this message.
    await page.locator('#try-model').selectOption('scripted/other.json');
    await page.locator('#try-thinking').selectOption('high');
    await page.locator('#try-role').selectOption('pirate');
    await sendText('hello');
    const chosen = await lastReply(2);
    // Back to the agent's own.
    for (const id of ['#try-model', '#try-thinking', '#try-role']) await page.locator(id).selectOption('');
    // 3. A skill with arguments, no text.
    await page.locator('#try-mode').selectOption('skill');
    await page.locator('#try-skill').selectOption('summarize');
    await page.locator('#try-args').fill('file=notes.md; depth=2');
    await page.locator('#input').fill('');
    await page.locator('#send').click();
    const skill = await lastReply(3);
    const modeAfterSkill = await page.locator('#try-mode').inputValue();
    // 4. A signal.
    await page.locator('#try-mode').selectOption('signal');
    await page.locator('#try-signal-type').fill('ci.failed');
    await page.locator('#try-attributes').fill('branch=main');
    await sendText('build 7 is red');
    const signal = await lastReply(4);
    const signalShown = await page.locator('.signal').first().innerText();

    // The choices show on the message they were sent with.
    const users = page.locator('.message.user');
    const badges = await users.nth(1).locator('.try-badges').innerText();
    const skillBadges = await users.nth(2).locator('.try-badges').innerText();

    // 5. Retry the message with choices: the same message, the same choices.
    await users.nth(1).locator('.try-retry').click();
    const retried = await lastReply(5);
    // ... and the signal: the same type, attributes and body.
    await page.locator('.signal-entry .try-retry').first().click();
    const signalRetried = await lastReply(6);

    // 6. A failed message gets a retry; retrying it fails again, as a new submission.
    await sendText('flaky');
    await page.locator('.advisory').first().waitFor();
    await idle();
    await page.locator('.advisory .try-retry').first().click();
    await page.waitForFunction(() => document.querySelectorAll('.advisory').length >= 2);
    await idle();
    const failures = await page.locator('.advisory').count();

    // 7. Rewind the files to before the first message (dry run listed, confirmed), then undo.
    await users.first().locator('.try-rewind').waitFor();
    await users.first().locator('.try-rewind').click();
    await page.locator('#try-rewound').waitFor();
    const rewound = await page.locator('#try-rewound').innerText();
    // The screenshot the docs use: choices picked, their badges, the rewind's undo.
    await page.locator('#try-model').selectOption('scripted/other.json');
    await page.locator('#try-role').selectOption('pirate');
    await page.locator('#input').fill('');
    await users.nth(1).scrollIntoViewIfNeeded();
    await page.screenshot({ path: shot });
    await page.locator('#try-rewound .try-undo').click();
    await page.locator('#run-state', { hasText: 'Undid rewind' }).waitFor();
    const undone = await page.locator('#run-state').innerText();

    // 8. Fork from the message with choices: the new conversation opens.
    const original = `#${encodeURIComponent(agent)}/${encodeURIComponent(conversation)}`;
    await users.nth(1).locator('.try-fork').click();
    await page.waitForFunction((before) => window.location.hash !== before, original);
    const opened = decodeURIComponent(await page.evaluate(() => window.location.hash));

    console.log(JSON.stringify({
      ok: true,
      refused,
      replies: { created, chosen, skill, signal, retried, signalRetried },
      signalShown,
      modeAfterSkill,
      badges,
      skillBadges,
      failures,
      dialog,
      rewound,
      undone,
      opened,
      consoleErrors,
    }));
  } catch (error) {
    const pages = browser.contexts().flatMap((context) => context.pages());
    const messages = pages.length
      ? await pages[0].locator('#messages').innerText().catch(() => '')
      : '';
    const runState = pages.length
      ? await pages[0].locator('#run-state').innerText().catch(() => '')
      : '';
    console.log(JSON.stringify({ ok: false, error: String(error), messages, runState, consoleErrors }));
  } finally {
    await browser.close();
  }
}

main();
