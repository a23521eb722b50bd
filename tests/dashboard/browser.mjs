// What the Chromium drivers share: their settings from the environment,
// and real headless Chromium (playwright-core), trusting only the daemon's
// certificate for the dashboard, with a page that collects the errors it meets.

import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

// The environment variable `name`, else `fallback`; exits with a message
// when neither is there.
export const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) {
    console.error(`FAILED: ${name} is not set`);
    process.exit(2);
  }
  return v;
};

// Chromium (CHROMIUM, default /usr/bin/chromium) trusting the key of the
// certificate in PROFD_SERVER_CERT alone (the base64 SHA-256 of its SPKI,
// as --ignore-certificate-errors-spki-list takes it), and a 1400×1000
// page in UTC. `problems` collects page errors, console errors and HTTP errors.
export async function openPage(timeoutMs) {
  const pem = readFileSync(env('PROFD_SERVER_CERT'), 'utf8');
  const spki = new X509Certificate(pem).publicKey.export({ type: 'spki', format: 'der' });
  const spkiHash = createHash('sha256').update(spki).digest('base64');
  return launchPage(timeoutMs, [`--ignore-certificate-errors-spki-list=${spkiHash}`]);
}

// Chromium with `extraArgs` and a page as openPage describes.
export async function launchPage(timeoutMs, extraArgs = []) {
  const browser = await chromium.launch({
    executablePath: env('CHROMIUM', '/usr/bin/chromium'),
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...extraArgs,
    ],
  });
  // UTC, so the time fields' values mean the times the tests give.
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, timezoneId: 'UTC' });
  page.setDefaultTimeout(timeoutMs);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
  return { browser, page, problems };
}
