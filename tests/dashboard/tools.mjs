// Drives profd's web dashboard in real headless Chromium (playwright-core)
// through its tools: a session of an earlier daemon run listed and opened;
// the function table in its default order (exclusive), sorted by each
// heading and filtered by name; the
// flame graph zoomed into a frame and back, and searched; every export
// downloaded; and two sessions compared (diff table and diff flame graph).
// Prints what it saw as one JSON line `RESULT {...}` for
// tests/tests/e2e/dashboard.rs to check; exits non-zero with the step that
// failed and the page's text otherwise.
//
// Environment:
//   PROFD_URL          the dashboard, https://localhost:PORT/
//   PROFD_TOKEN        an operator token of the daemon
//   PROFD_BASE         an ended session of an earlier run (the diff's base)
//   PROFD_NEW          an ended session of this run (the diff's new side)
//   PROFD_DOWNLOADS    the directory downloads are saved into
//   PROFD_SERVER_CERT  the daemon's certificate (PEM)
//   PROFD_SCREENSHOT   where to write a screenshot of the diff
//   CHROMIUM           the browser (default /usr/bin/chromium)

import { join } from 'node:path';
import { env, openPage } from './browser.mjs';

const url = env('PROFD_URL');
const token = env('PROFD_TOKEN');
const base = env('PROFD_BASE');
const next = env('PROFD_NEW');
const downloads = env('PROFD_DOWNLOADS');
const screenshot = env('PROFD_SCREENSHOT', '');

let step = 'launching Chromium';
const { browser, page, problems } = await openPage(60000);

const names = () =>
  page.$$eval('#functions tbody tr[data-name]', (trs) => trs.map((tr) => tr.dataset.name));
const rows = () =>
  page.$$eval('#functions tbody tr[data-name]', (trs) =>
    trs.map((tr) => ({
      name: tr.dataset.name,
      module: tr.dataset.module || '',
      inlined: tr.dataset.inlined === 'true',
      inclusive: Number(tr.dataset.inclusive),
      exclusive: Number(tr.dataset.exclusive),
    })),
  );
const frames = (selector) =>
  page.$$eval(`${selector} svg g.frame`, (gs) =>
    gs.map((g) => {
      const r = g.querySelector('rect');
      return {
        name: g.dataset.name,
        x: Number(r.getAttribute('x')),
        width: Number(r.getAttribute('width')),
        fill: r.getAttribute('fill'),
        match: g.classList.contains('match'),
        dim: g.classList.contains('dim'),
        change: g.dataset.change === undefined ? null : Number(g.dataset.change),
      };
    }),
  );
// Waits until the table lists every name of `all`, starts with one of
// `first` (if given) and has `count` rows (if given).
const tableWhere = ({ all = [], first = null, count = null }) =>
  page.waitForFunction(
    ([want, lead, n]) => {
      const seen = [...document.querySelectorAll('#functions tbody tr[data-name]')].map((tr) => tr.dataset.name);
      return want.every((w) => seen.includes(w)) &&
        (lead === null || lead.includes(seen[0])) &&
        (n === null || seen.length === n);
    },
    [all, first, count],
  );

const result = {};
try {
  step = `opening ${url}`;
  await page.goto(url);
  step = 'signing in';
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');

  step = `listing session ${base} of the earlier run`;
  const baseRow = `#sessions tbody tr[data-id="${base}"]`;
  await page.locator(baseRow).waitFor();
  result.baseRow = {
    earlier: await page.getAttribute(baseRow, 'data-earlier'),
    text: (await page.textContent(baseRow)).trim(),
  };
  step = 'opening it';
  await page.click(baseRow);
  await tableWhere({ all: ['leaf_a', 'leaf_b'] });
  await page.waitForFunction(() => document.querySelector('#status').textContent.startsWith('ended'));
  result.baseRows = await rows();

  step = `opening session ${next}`;
  await page.click(`#sessions tbody tr[data-id="${next}"]`);
  await page.waitForFunction(() => document.querySelector('#status').textContent.startsWith('ended'));
  await tableWhere({ all: ['leaf_a', 'leaf_b'] });
  result.newRows = await rows();

  step = 'sorting the table';
  await page.click('#functions th[data-sort="inclusive"]');
  await page.locator('#functions th.sorted[data-sort="inclusive"]').waitFor();
  result.byInclusive = await rows();
  await page.click('#functions th[data-sort="exclusive"]');
  await tableWhere({ first: ['leaf_a', 'leaf_b'] });
  result.byExclusive = await rows();
  await page.click('#functions th[data-sort="exclusive"]');
  result.byExclusiveAscending = await rows();
  await page.click('#functions th[data-sort="name"]');
  result.byName = await names();
  await page.click('#functions th[data-sort="exclusive"]');

  step = 'filtering the table';
  await page.fill('#functions-filter', 'LEAF');
  await tableWhere({ count: 2 });
  result.filtered = await names();
  await page.fill('#functions-filter', '');
  await tableWhere({ all: ['main', 'work', 'leaf_a'] });

  step = 'zooming into mid';
  await page.locator('#flame svg g.frame[data-name="mid"]').first().waitFor();
  result.flameWidth = Number(await page.getAttribute('#flame svg', 'width'));
  result.beforeZoom = await frames('#flame');
  await page.click('#flame svg g.frame[data-name="mid"]');
  await page.locator('#flame-reset').waitFor({ state: 'visible' });
  result.zoomed = await frames('#flame');
  // The click also selects mid; its callers arrive with an answer of the
  // daemon, so wait for them (and report whatever is there if they never come).
  await page
    .waitForFunction(() => document.querySelector('#callers-title').textContent.startsWith('mid:'))
    .catch(() => {});
  result.callersAfterZoom = (await page.textContent('#callers-title')).trim();
  await page.click('#flame-reset');
  await page.locator('#flame-reset').waitFor({ state: 'hidden' });
  result.afterReset = await frames('#flame');

  step = 'searching the flame graph';
  await page.fill('#flame-search', 'leaf_b');
  await page.waitForFunction(() => document.querySelector('#flame-matched').textContent !== '');
  result.matched = (await page.textContent('#flame-matched')).trim();
  result.searched = await frames('#flame');
  await page.fill('#flame-search', '');

  step = 'downloading every export';
  result.downloads = {};
  for (const format of ['pprof', 'folded', 'svg', 'speedscope', 'json']) {
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.click(`#downloads button[data-format="${format}"]`),
    ]);
    const path = join(downloads, download.suggestedFilename());
    await download.saveAs(path);
    result.downloads[format] = { file: download.suggestedFilename(), path };
  }

  step = `comparing session ${next} against ${base}`;
  await page.fill('#diff-new', next);
  await page.fill('#diff-base', base);
  await page.click('#diff-form button[type=submit]');
  await page.locator('#diff-table tbody tr').first().waitFor();
  result.diffTitle = (await page.textContent('#diff-title')).trim();
  result.diffRows = await page.$$eval('#diff-table tbody tr', (trs) =>
    trs.map((tr) => ({
      name: tr.dataset.name,
      inlined: tr.dataset.inlined === 'true',
      baseExclusive: Number(tr.dataset.baseExclusive),
      newExclusive: Number(tr.dataset.newExclusive),
      baseInclusive: Number(tr.dataset.baseInclusive),
      newInclusive: Number(tr.dataset.newInclusive),
      change: Number(tr.dataset.change),
      share: Number(tr.dataset.share),
      cells: [...tr.cells].map((td) => td.textContent),
      class: tr.className,
    })),
  );
  result.diffRates = await page.getAttribute('#diff-unit', 'data-rates');
  result.diffWarnings = await page.$$eval('#diff-warnings li', (lis) => lis.map((li) => li.textContent));
  result.diffFlame = await frames('#diff-flame');
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  result.problems = problems;
} catch (e) {
  const text = await page.evaluate(() => document.body.innerText).catch(() => '(no page)');
  console.error(`FAILED while ${step}: ${e.message}\n--- page text ---\n${text}\n--- problems ---\n${problems.join('\n')}`);
  await browser.close();
  process.exit(1);
}
await browser.close();
console.log(`RESULT ${JSON.stringify(result)}`);
