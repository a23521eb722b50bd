// Drives profd's web dashboard in real headless Chromium (playwright-core)
// for an off-CPU session: signs in, attaches to a process through the
// attach form with the off-cpu mode, waits for the workload's waiting
// functions in the live table, reads how the table, the totals and the
// flame graph show them (times, not samples), and waits for the session to
// end. Prints what it saw as one JSON line `RESULT {...}` for
// tests/tests/e2e/dashboard.rs to check; exits non-zero with the step that
// failed and the page's text otherwise.
//
// Environment:
//   PROFD_URL          the dashboard, https://localhost:PORT/
//   PROFD_TOKEN        an operator token of the daemon
//   PROFD_PID          the process to attach to
//   PROFD_SECONDS      the session's duration
//   PROFD_SERVER_CERT  the daemon's certificate (PEM)
//   CHROMIUM           the browser (default /usr/bin/chromium)

import { env, openPage } from './browser.mjs';

const url = env('PROFD_URL');
const token = env('PROFD_TOKEN');
const pid = env('PROFD_PID');
const seconds = env('PROFD_SECONDS');

let step = 'launching Chromium';
const { browser, page, problems } = await openPage(60000);

// The function table's rows: the counts (data attributes, nanoseconds)
// and the text of the inclusive cell.
const rows = () =>
  page.$$eval('#functions tbody tr[data-name]', (trs) =>
    trs.map((tr) => ({
      name: tr.dataset.name,
      inclusive: Number(tr.dataset.inclusive),
      shown: tr.children[1].textContent.trim(),
    })),
  );

const result = {};
try {
  step = `opening ${url}`;
  await page.goto(url);
  step = 'signing in';
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.locator('#attach-form').waitFor({ state: 'visible' });

  step = `attaching to ${pid} in off-cpu mode`;
  await page.fill('#attach-pid', pid);
  await page.fill('#attach-seconds', seconds);
  await page.selectOption('#attach-mode', '2');
  await page.click('#attach-form button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#session-title').textContent.includes('off-CPU'));

  step = 'waiting for the waiting functions in the live table';
  await page.waitForFunction(
    (names) => {
      const seen = new Set([...document.querySelectorAll('#functions tbody tr')].map((tr) => tr.dataset.name));
      return names.every((n) => seen.has(n));
    },
    ['sleep_part', 'pipe_part'],
  );
  result.title = (await page.textContent('#session-title')).trim();
  result.live = await rows();

  step = 'waiting for the session to end';
  await page.waitForFunction(() => document.querySelector('#status').textContent.startsWith('ended'), null, {
    timeout: 120000,
  });
  result.final = await rows();
  result.attributed = (await page.textContent('#totals dd[data-total="attributed"]')).trim();
  result.timeTotals = (await page.textContent('#time-totals')).trim();
  await page.locator('#flame svg g.frame').first().waitFor();
  result.flameTitles = await page.$$eval('#flame svg g.frame title', (ts) => ts.map((t) => t.textContent));
  result.sessionRow = (await page.textContent('#sessions tbody tr.selected')).trim();
  result.problems = problems;
} catch (e) {
  const text = await page.evaluate(() => document.body.innerText).catch(() => '(no page)');
  console.error(`FAILED while ${step}: ${e.message}\n--- page text ---\n${text}\n--- problems ---\n${problems.join('\n')}`);
  await browser.close();
  process.exit(1);
}
await browser.close();
console.log(`RESULT ${JSON.stringify(result)}`);
