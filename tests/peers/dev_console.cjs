// Drives the `flue dev` console in headless Chromium (playwright-core with the system
// browser): node dev_console.cjs <console url> <workspace root> <screenshot dir>
//
// The workspace is one `flue init` made. Scenarios, each ending in a screenshot:
//   1-loaded   the page loads with no console errors and lists the agent
//   2-reply    a message gets the streamed reply and a tool call (opened: input and output)
//   3-edited   editing the agent file changes the next reply, without reloading the page
//   4-broken   a broken edit shows the diagnostics banner (file and line); the old build answers
//   5-fixed    fixing the file clears the banner
//   6-approval the Agent tab lists command tools and marks always_ask ones; a tool call that
//              needs approval waits in the chat; Allow runs it
//   7-question an MCP server's question (the Python peer's `release` tool) waits in the chat,
//              listed in the Actions tab too; its form in the chat (defaults filled in)
//              answers it
// Prints one JSON line {ok, steps, consoleErrors} and exits 0 only when every step passed.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { openConsole, TIMEOUT } = require('./console_page.cjs');

const [url, root, shots] = process.argv.slice(2);

const AGENT_V2 = `---
description: The edited agent, answering from the second script
model: scripted/scripts/v2.json
tools: [read_file]
skills: [greeting]
---
You answer from the second script.
`;
const BROKEN = `---
description: A broken edit
model: scripted/scripts/v2.json
tools: [read_file
---
Broken.
`;
const AGENT_BASH = `---
description: Runs commands, each after your approval
model: scripted/scripts/bash.json
tools:
  - bash
  - name: count_lines
    description: Count the lines of a file
    command: wc -l < "$path"
---
You run commands.
`;
const SCRIPT_BASH = JSON.stringify({ rules: [
  { when: { tool_result: 'bash' }, reply: { text: 'The command printed: {{tool_result}}' } },
  { reply: { text: 'Let me run it.', tool_calls: [{ name: 'bash', input: { command: 'echo approved run' } }] } },
] });
const AGENT_RELEASE = `---
description: Releases, after the MCP server asks which version
model: scripted/scripts/release.json
mcp:
  py:
    command: ${JSON.stringify(path.join(__dirname, '.venv/bin/python'))}
    args: [${JSON.stringify(path.join(__dirname, 'py_server.py'))}, stdio]
---
You release.
`;
const SCRIPT_RELEASE = JSON.stringify({ rules: [
  { when: { tool_result: 'mcp__py__release' }, reply: { text: 'The server said: {{tool_result}}' } },
  { reply: { text: 'Releasing.', tool_calls: [{ name: 'mcp__py__release', input: {} }] } },
] });
const SCRIPT_V2 = JSON.stringify({ rules: [{ reply: { text: 'Version two answers: {{user}}' } }] });

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  const steps = [];
  const { browser, page, consoleErrors } = await openConsole({ width: 1440, height: 900 });
  try {
    const shot = async (name) => {
      await page.waitForTimeout(150);
      await page.screenshot({ path: path.join(shots, `${name}.png`) });
      steps.push(name);
    };
    const send = async (text) => {
      await page.fill('#input', text);
      await page.press('#input', 'Enter');
    };
    const lastReply = () => page.locator('.message.assistant').last();

    // 1. The page loads with the agent and no console errors.
    await page.goto(url);
    await page.locator('.agent.selected', { hasText: 'assistant' }).waitFor();
    await page.locator('#build.ok').waitFor();
    await page.evaluate(() => { window.__loadedOnce = true; });
    await page.locator('#tab-agent', { hasText: 'read_file' }).waitFor();
    if (consoleErrors.length) throw new Error(`console errors on load: ${consoleErrors.join(' | ')}`);
    await shot('1-loaded');

    // 2. A message: the streamed reply and a tool call with input and output.
    await send('read the notes');
    await page.locator('.message.user .bubble', { hasText: 'read the notes' }).waitFor();
    const tool = page.locator('details.tool', { hasText: 'read_file' }).first();
    await tool.waitFor();
    await page.locator('.assistant-body', { hasText: 'notes.md says:' }).waitFor();
    await page.locator('.state.ok', { hasText: 'done' }).first().waitFor();
    await tool.locator('summary').click();
    await tool.locator('.io pre', { hasText: 'notes.md' }).first().waitFor();
    await tool.locator('.io h4', { hasText: 'Output' }).waitFor();
    await lastReply().locator('.usage').waitFor();
    await page.locator('.tab-button[data-tab="transcript"]').click();
    await page.locator('#tab-transcript .record', { hasText: 'read_file' }).first().waitFor();
    await shot('2-reply');

    // 3. Editing the agent file changes the next reply; the page is not reloaded.
    const buildBefore = await page.evaluate(() => document.getElementById('build').textContent);
    fs.writeFileSync(path.join(root, 'scripts/v2.json'), SCRIPT_V2);
    fs.writeFileSync(path.join(root, 'agents/assistant.md'), AGENT_V2);
    await page.locator('#build.ok', { hasText: 'agents/assistant.md' }).waitFor();
    await page.locator('.tab-button[data-tab="agent"]').click();
    await page.locator('#tab-agent', { hasText: 'scripted/scripts/v2.json' }).waitFor();
    await send('are you new?');
    await page.locator('.assistant-body', { hasText: 'Version two answers: are you new?' }).waitFor();
    const stillLoaded = await page.evaluate(() => window.__loadedOnce === true);
    if (!stillLoaded) throw new Error('the page was reloaded');
    const buildAfter = await page.evaluate(() => document.getElementById('build').textContent);
    if (buildAfter === buildBefore) throw new Error(`the build did not change: ${buildAfter}`);
    await shot('3-edited');

    // 4. A broken edit: the banner names the file and line; the old build keeps answering.
    fs.writeFileSync(path.join(root, 'agents/assistant.md'), BROKEN);
    const banner = page.locator('#diagnostics');
    await banner.waitFor({ state: 'visible' });
    await banner.locator('.where', { hasText: /^agents\/assistant\.md:\d+$/ }).first().waitFor();
    await page.locator('#build.bad').waitFor();
    await send('still there?');
    await page.locator('.assistant-body', { hasText: 'Version two answers: still there?' }).waitFor();
    await shot('4-broken');

    // 5. Fixing the file clears the banner.
    fs.writeFileSync(path.join(root, 'agents/assistant.md'), AGENT_V2.replace('second script', 'second script, fixed'));
    await banner.waitFor({ state: 'hidden' });
    await page.locator('#build.ok').waitFor();
    await shot('5-fixed');

    // 6. A tool call that needs approval pauses in the chat until Allow (here: Always).
    fs.writeFileSync(path.join(root, 'scripts/bash.json'), SCRIPT_BASH);
    fs.appendFileSync(path.join(root, 'flue.toml'), '\n[defaults.permissions]\nbash = "always_ask"\n');
    fs.writeFileSync(path.join(root, 'agents/assistant.md'), AGENT_BASH);
    await page.locator('#tab-agent', { hasText: 'scripted/scripts/bash.json' }).waitFor();
    // The Agent tab lists the command tool and marks the tool that asks first, with the rule.
    await page.locator('#tab-agent [data-tool="bash"][data-policy="always_ask"]', { hasText: 'rule `bash` from flue.toml' }).waitFor();
    await page.locator('#tab-agent [data-tool="count_lines"][data-origin="command"]', { hasText: 'command tool' }).waitFor();
    if (await page.locator('#tab-agent [data-tool="count_lines"][data-policy="always_ask"]').count()) throw new Error('count_lines is marked as asking');
    await send('run something');
    const action = page.locator('.messages .action.pending', { hasText: 'bash' });
    await action.waitFor();
    await page.locator('#actions-count', { hasText: '1' }).waitFor();
    // Always: allowed now, and a standing rule of the conversation from then on.
    await action.locator('button', { hasText: 'Always' }).click();
    await page.locator('.assistant-body', { hasText: 'The command printed: approved run' }).waitFor();
    await page.locator('#tab-actions .rules .action', { hasText: 'bash' }).filter({ hasText: 'approves without asking' }).waitFor({ state: 'attached' });
    await shot('6-approval');
    // The next call runs without asking.
    await send('run it again');
    await page.locator('.assistant-body', { hasText: 'The command printed: approved run' }).nth(1).waitFor();
    if (await page.locator('.messages .action.pending').count()) throw new Error('the standing rule did not approve the second call');

    // 7. An MCP server's question waits in the chat; the form in the Actions tab answers it.
    fs.writeFileSync(path.join(root, 'scripts/release.json'), SCRIPT_RELEASE);
    fs.writeFileSync(path.join(root, 'agents/assistant.md'), AGENT_RELEASE);
    await page.locator('#tab-agent', { hasText: 'scripted/scripts/release.json' }).waitFor();
    await send('release it');
    const question = page.locator('.messages .action.pending', { hasText: 'Which version should be released?' });
    await question.waitFor();
    // The Actions tab lists it too; it is answered where it is asked, in the chat.
    await page.locator('#tab-actions .action.pending', { hasText: 'Which version should be released?' }).waitFor({ state: 'attached' });
    const form = question;
    await form.locator('label', { hasText: 'channel' }).locator('select').waitFor();
    const channel = await form.locator('label', { hasText: 'channel' }).locator('select').inputValue();
    if (channel !== 'stable') throw new Error(`the channel default was not filled in: ${channel}`);
    await form.locator('label', { hasText: 'version' }).locator('input').fill('4.0');
    await form.locator('label', { hasText: 'channel' }).locator('select').selectOption('beta');
    await shot('7-question');
    await form.locator('button', { hasText: 'Accept' }).click();
    await page.locator('.assistant-body', { hasText: 'released 4.0 on beta (notify: yes)' }).waitFor();

    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
    console.log(JSON.stringify({ ok: true, steps, consoleErrors }));
  } catch (error) {
    console.log(JSON.stringify({ ok: false, steps, consoleErrors, error: String(error && error.stack || error) }));
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

main();
