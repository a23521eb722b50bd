// Drives profd's web dashboard in real headless Chromium (playwright-core)
// as a person would: a wrong token, then the right one; the session list;
// the continuous profiling panel (a service's merged table and flame graph,
// then over custom time ranges);
// the live table of one session read twice; a function clicked for its
// callers and callees; the flame graph; the totals; the session stopped
// and its final table; a reload. Prints what it saw as
// one JSON line `RESULT {...}` for tests/tests/e2e/dashboard.rs to check, and
// exits non-zero with the step that failed and the page's text otherwise.
//
// Environment:
//   PROFD_URL          the dashboard, https://localhost:PORT/
//   PROFD_TOKEN        an operator token of the daemon
//   PROFD_SESSION      the id of a running session to open
//   PROFD_SERVER_CERT  the daemon's certificate (PEM): only its key is
//                      trusted (Chromium's --ignore-certificate-errors-spki-list)
//   PROFD_FOCUS        the function to click (its callers are read)
//   PROFD_SERVICE      a service of the continuous history to open
//   PROFD_RANGE        FROM..TO, Unix seconds: a custom range of the history
//                      to open the service over
//   PROFD_EMPTY_RANGE  FROM..TO, Unix seconds: a range with no windows
//   PROFD_SCREENSHOT   where to write a screenshot of the page
//   CHROMIUM           the browser (default /usr/bin/chromium)

import { env, openPage } from './browser.mjs';

const url = env('PROFD_URL');
const token = env('PROFD_TOKEN');
const sessionId = env('PROFD_SESSION');
const focus = env('PROFD_FOCUS');
const service = env('PROFD_SERVICE');
const screenshot = env('PROFD_SCREENSHOT', '');
// FROM..TO in Unix seconds as the time fields take it (the page is in UTC).
const fields = (range) =>
  range.split('..').map((s) => new Date(Number(s) * 1000).toISOString().slice(0, 19));
const range = fields(env('PROFD_RANGE'));
const emptyRange = fields(env('PROFD_EMPTY_RANGE'));
const WAIT_MS = 30000;

let step = 'launching Chromium';
const { browser, page, problems } = await openPage(WAIT_MS);
let watchStreams = 0;
page.on('request', (r) => {
  if (r.url().endsWith('/profd.v1.Profiler/Watch')) watchStreams += 1;
});
page.on('requestfailed', (r) => {
  // A Watch stream is cancelled when the page leaves its session.
  const why = r.failure()?.errorText || '';
  if (!why.includes('ERR_ABORTED')) problems.push(`request failed: ${r.url()} ${why}`);
});

// Rows of a table: { name, inclusive, exclusive } from the data attributes.
const rows = (selector) =>
  page.$$eval(`${selector} tbody tr[data-name]`, (trs) =>
    trs.map((tr) => ({
      id: Number(tr.dataset.id),
      name: tr.dataset.name,
      module: tr.dataset.module || '',
      inlined: tr.dataset.inlined === 'true',
      inclusive: Number(tr.dataset.inclusive),
      exclusive: Number(tr.dataset.exclusive || 0),
    })),
  );

const totals = () =>
  page.$$eval('#totals dd[data-total]', (dds) =>
    Object.fromEntries(dds.map((dd) => [dd.dataset.total, dd.textContent.trim()])),
  );

const result = {};
try {
  step = `opening ${url}`;
  const response = await page.goto(url);
  result.pageStatus = response.status();
  result.securityHeaders = {
    csp: response.headers()['content-security-policy'] || '',
    nosniff: response.headers()['x-content-type-options'] || '',
  };
  await page.locator('#login-form').waitFor({ state: 'visible' });

  step = 'signing in with a wrong token';
  await page.fill('#token', 'not-a-token-of-this-daemon');
  await page.click('#login-form button[type=submit]');
  await page.locator('#login-error').waitFor({ state: 'visible' });
  result.wrongTokenError = (await page.textContent('#login-error')).trim();
  result.storedAfterWrongToken = await page.evaluate(() => sessionStorage.getItem('profd.token'));

  step = 'signing in with the token';
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.locator(`#sessions tbody tr[data-id="${sessionId}"]`).waitFor();
  result.sessionRow = (await page.textContent(`#sessions tbody tr[data-id="${sessionId}"]`)).trim();
  result.tokenStorage = await page.evaluate(() => ({
    session: sessionStorage.getItem('profd.token') !== null,
    local: localStorage.length,
  }));

  step = `opening the service ${service} of the continuous profiling panel`;
  const serviceRow = `#services tbody tr[data-service="${service}"]`;
  await page.locator(serviceRow).waitFor();
  result.services = await page.$$eval('#services tbody tr', (trs) => trs.map((tr) => tr.dataset.service));
  await page.click(serviceRow);
  await page.waitForFunction(
    (names) => {
      const seen = new Set([...document.querySelectorAll('#functions tbody tr')].map((tr) => tr.dataset.name));
      return names.every((n) => seen.has(n));
    },
    ['work', 'mid', 'leaf_a', 'leaf_b'],
  );
  await page.locator('#flame svg g.frame[data-name="leaf_b"]').first().waitFor();
  result.continuous = {
    title: (await page.textContent('#session-title')).trim(),
    rows: await rows('#functions'),
    flame: await page.$$eval('#flame svg g.frame', (gs) => gs.map((g) => g.dataset.name)),
  };

  step = 'picking a custom range with no windows';
  await page.selectOption('#continuous-range', 'custom');
  const pick = async ([from, to]) => {
    await page.fill('#continuous-from', from);
    await page.fill('#continuous-to', to);
    await page.click('#continuous-form button[type=submit]');
  };
  await pick(emptyRange);
  await page.locator('#no-windows').waitFor({ state: 'visible' });
  result.emptyRange = {
    servicesShown: await page.isVisible('#services'),
    summary: (await page.textContent('#continuous-summary')).trim(),
  };

  step = `opening the service ${service} over a custom range`;
  await pick(range);
  await page.locator(serviceRow).waitFor();
  result.range = {
    samples: (await page.textContent(`${serviceRow} td:nth-child(2)`)).trim(),
    summary: (await page.textContent('#continuous-summary')).trim(),
  };
  await page.click(serviceRow);
  await page.waitForFunction(() => document.querySelector('#session-title').textContent.includes(' to '));
  await page.waitForFunction(
    (names) => {
      const seen = new Set([...document.querySelectorAll('#functions tbody tr')].map((tr) => tr.dataset.name));
      return names.every((n) => seen.has(n));
    },
    ['work', 'mid', 'leaf_a', 'leaf_b'],
  );
  result.range.title = (await page.textContent('#session-title')).trim();
  result.range.rows = await rows('#functions');

  step = 'opening the session';
  watchStreams = 0;
  await page.click(`#sessions tbody tr[data-id="${sessionId}"]`);
  await page.waitForFunction(
    (names) => {
      const seen = new Set([...document.querySelectorAll('#functions tbody tr')].map((tr) => tr.dataset.name));
      return names.every((n) => seen.has(n));
    },
    ['main', 'work', 'mid', 'leaf_a', 'leaf_b'],
  );
  result.first = { rows: await rows('#functions'), totals: await totals() };

  step = 'watching the table update';
  const before = result.first.rows.find((r) => r.name === focus).inclusive;
  await page.waitForFunction(
    ([name, count]) => {
      const tr = [...document.querySelectorAll('#functions tbody tr')].find((t) => t.dataset.name === name);
      return tr && Number(tr.dataset.inclusive) > count;
    },
    [focus, before],
  );
  result.second = { rows: await rows('#functions'), totals: await totals() };
  result.status = (await page.textContent('#status')).trim();
  result.title = (await page.textContent('#session-title')).trim();

  step = 'drawing the flame graph';
  await page.locator('#flame svg g.frame').first().waitFor();
  result.flame = await page.$$eval('#flame svg g.frame', (gs) =>
    gs.map((g) => {
      const r = g.querySelector('rect');
      return {
        name: g.dataset.name,
        depth: Number(g.dataset.depth),
        x: Number(r.getAttribute('x')),
        width: Number(r.getAttribute('width')),
      };
    }),
  );

  step = `clicking ${focus} for its callers and callees`;
  await page.click(`#functions tbody tr[data-name="${focus}"]`);
  await page.locator('#callers-panel').waitFor({ state: 'visible' });
  await page.locator('#callers tbody tr').first().waitFor();
  result.callersTitle = (await page.textContent('#callers-title')).trim();
  result.callers = await rows('#callers');
  result.callees = await rows('#callees');

  step = 'clicking a frame of the flame graph';
  await page.click('#flame svg g.frame[data-name="work"]');
  await page.waitForFunction(() => document.querySelector('#callers-title').textContent.startsWith('work:'));
  result.workCallers = await rows('#callers');
  result.workCallees = await rows('#callees');

  step = 'stopping the session';
  await page.click('#stop');
  await page.waitForFunction(() => document.querySelector('#status').textContent.startsWith('ended'), null, {
    timeout: 120000,
  });
  result.final = {
    rows: await rows('#functions'),
    totals: await totals(),
    status: (await page.textContent('#status')).trim(),
    title: (await page.textContent('#session-title')).trim(),
    moreRows: await page.isVisible('#more-rows'),
  };
  result.watchStreams = watchStreams;

  if (screenshot) {
    step = 'taking a screenshot';
    await page.screenshot({ path: screenshot, fullPage: true });
  }

  step = 'reloading the page (the token stays for the tab)';
  await page.reload();
  await page.waitForFunction(() => document.querySelector('#status').textContent.startsWith('ended'));
  result.afterReload = { rows: await rows('#functions'), totals: await totals() };

  step = 'signing out';
  await page.click('#logout');
  await page.locator('#login-form').waitFor({ state: 'visible' });
  result.storedAfterSignOut = await page.evaluate(() => sessionStorage.getItem('profd.token'));
  result.problems = problems;
} catch (e) {
  const text = await page.evaluate(() => document.body.innerText).catch(() => '(no page)');
  console.error(`FAILED while ${step}: ${e.message}\n--- page text ---\n${text}\n--- problems ---\n${problems.join('\n')}`);
  await browser.close();
  process.exit(1);
}
await browser.close();
console.log(`RESULT ${JSON.stringify(result)}`);
