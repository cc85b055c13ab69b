// The page every console script drives: headless Chromium (Debian's, or $CHROMIUM) through
// playwright-core, one page of the given viewport whose console errors and uncaught
// exceptions are collected in `consoleErrors` (each script reports them with its result).
'use strict';

const { chromium } = require('playwright-core');

// Every wait is for something the page shows; this deadline only ends a run that would hang.
const TIMEOUT = 120000;

async function openConsole(viewport) {
  const consoleErrors = [];
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage({ viewport });
    page.setDefaultTimeout(TIMEOUT);
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(message.text());
    });
    page.on('pageerror', (error) => consoleErrors.push(String(error)));
    return { browser, page, consoleErrors };
  } catch (error) {
    await browser.close();
    throw error;
  }
}

module.exports = { openConsole, TIMEOUT };
