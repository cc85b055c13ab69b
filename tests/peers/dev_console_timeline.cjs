// What the `flue dev` console's Timeline tab shows for a conversation's latest submission
// (headless Chromium through playwright-core): every step row with its kind, nesting depth,
// label, the duration and tokens text, and which one is marked slowest.
//   node dev_console_timeline.cjs <console url> <agent> <conversation> <screenshot> [<prompt screenshot>]
// Waits until the tab draws a settled submission with a nested step; with a second
// screenshot, also opens the first model call's prompt as sent (a click on its row) and reads
// it. Prints one JSON line {ok, summary, rows, prompt, consoleErrors}.
'use strict';

const { openConsole } = require('./console_page.cjs');

const [url, agent, conversation, shot, promptShot] = process.argv.slice(2);

async function main() {
  const { browser, page, consoleErrors } = await openConsole({ width: 1280, height: 900 });
  try {
    await page.goto(`${url}#${encodeURIComponent(agent)}/${encodeURIComponent(conversation)}`);
    await page.locator('#build.ok').waitFor();
    await page.locator('button[data-tab="timeline"]').click();
    await page.locator('#tab-timeline .tl-step[data-depth="1"]').first().waitFor();
    const summary = await page.locator('#tab-timeline .tl-summary').innerText();
    const rows = await page.locator('#tab-timeline .tl-step').evaluateAll((nodes) => nodes.map((node) => {
      const bar = node.querySelector('.tl-bar');
      const track = node.querySelector('.tl-track');
      return {
        kind: node.dataset.kind,
        depth: Number(node.dataset.depth),
        label: node.querySelector('.tl-label').innerText,
        facts: node.querySelector('.tl-facts').innerText,
        slowest: node.classList.contains('slowest'),
        flagged: Boolean(node.querySelector('.tl-flag')),
        error: node.classList.contains('error'),
        // Where the bar sits on its track, as fractions of the axis.
        left: bar.offsetLeft / track.clientWidth,
        width: bar.offsetWidth / track.clientWidth,
      };
    }));
    await page.screenshot({ path: shot, fullPage: false });
    let prompt = null;
    if (promptShot) {
      await page.locator('#tab-timeline .tl-step.tl-clickable').first().click();
      const view = page.locator('#tab-timeline section.prompt');
      await view.waitFor();
      // Every part opened, as a reader would.
      await view.locator('details').evaluateAll((nodes) => nodes.forEach((node) => { node.open = true; }));
      prompt = {
        source: await view.locator('.prompt-source').innerText(),
        head: await view.locator('.prompt-head').innerText(),
        system: await view.locator('.prompt-system').innerText(),
        tools: await view.locator('.prompt-tools code').allInnerTexts(),
        messages: await view.locator('.prompt-message').count(),
        text: await view.innerText(),
      };
      await view.scrollIntoViewIfNeeded();
      await page.screenshot({ path: promptShot, fullPage: false });
    }
    console.log(JSON.stringify({ ok: true, summary, rows, prompt, consoleErrors }));
  } catch (error) {
    const pages = browser.contexts().flatMap((context) => context.pages());
    const timeline = pages.length
      ? await pages[0].locator('#tab-timeline').innerText().catch(() => '')
      : '';
    console.log(JSON.stringify({ ok: false, error: String(error), timeline, consoleErrors }));
  } finally {
    await browser.close();
  }
}

main();
