// Opens an SVG flame graph of `profctl export --format svg` as a file in
// real headless Chromium (playwright-core) and reports what the browser
// made of it: every frame's title and rendered box (getBBox), the details
// line the SVG's own script shows with the pointer over a frame, and the
// frames after a click on another one zooms into it. Prints one JSON line
// `RESULT {...}` for tests/tests/e2e/views.rs to check; exits non-zero
// with the step that failed otherwise.
//
// Environment:
//   PROFD_SVG    the SVG file
//   PROFD_HOVER  the function whose frame the pointer goes over
//   PROFD_ZOOM   the function whose frame is clicked
//   CHROMIUM     the browser (default /usr/bin/chromium)

import { pathToFileURL } from 'node:url';
import { env, launchPage } from './browser.mjs';

const file = env('PROFD_SVG');
const hover = env('PROFD_HOVER');
const zoom = env('PROFD_ZOOM');

let step = 'launching Chromium';
const { browser, page, problems } = await launchPage(60000);

// Every frame (`#frames > g`): its title, the name before ` (`, its box
// as laid out, and whether it is displayed.
const frames = () =>
  page.$$eval('#frames > g', (gs) =>
    gs.map((g) => {
      const title = g.querySelector('title')?.textContent ?? '';
      const box = g.querySelector('rect').getBBox();
      return {
        title,
        name: title.replace(/ \([^()]*\)$/, ''),
        x: box.x,
        y: box.y,
        width: box.width,
        shown: getComputedStyle(g).display !== 'none',
      };
    }),
  );
// The frame of `name` (the first one) as a locator.
const frameOf = async (name) => {
  const i = (await frames()).findIndex((f) => f.name === name);
  if (i < 0) throw new Error(`no frame of ${name}`);
  return page.locator('#frames > g').nth(i);
};

// Waits until `fn` holds in the page, failing at once on a page error.
const until = async (fn) => {
  let poll;
  const failed = new Promise((_, reject) => {
    poll = setInterval(() => problems.length && reject(new Error(problems.join('; '))), 100);
  });
  try {
    await Promise.race([page.waitForFunction(fn), failed]);
  } finally {
    clearInterval(poll);
  }
};

try {
  step = 'loading the SVG';
  await page.goto(pathToFileURL(file).href, { waitUntil: 'load' });
  // Chromium shows what it could parse of a malformed file, and says why.
  const xmlError = await page.evaluate(
    () => document.getElementsByTagName('parsererror')[0]?.textContent ?? null,
  );
  if (xmlError !== null) problems.push(`XML error: ${xmlError}`);
  // The SVG's onload script has run once its buttons are set up.
  await until(() => typeof unzoombtn !== 'undefined' && unzoombtn !== null);
  step = 'reading the frames';
  const before = await frames();
  step = `pointing at ${hover}`;
  await (await frameOf(hover)).hover();
  const details = await page.textContent('#details');
  step = `clicking ${zoom}`;
  await (await frameOf(zoom)).click();
  await until(() => !unzoombtn.classList.contains('hide'));
  const zoomed = await frames();
  const unzoomShown = await page.isVisible('#unzoom');
  console.log(`RESULT ${JSON.stringify({ frames: before, details, zoomed, unzoomShown, problems })}`);
  await browser.close();
} catch (e) {
  console.error(`FAILED while ${step}: ${e.stack ?? e}`);
  console.error(`problems: ${JSON.stringify(problems)}`);
  await browser.close();
  process.exit(1);
}
