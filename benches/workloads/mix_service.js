// A node service for benches/hostmix.sh: every PERIOD_MS, requests for
// BUSY_MS (building, encoding and decoding JSON, matching, sorting: code V8
// compiles), the event loop idle the rest. Every second it writes the
// requests done so far to PROGRESS (written aside and renamed, so a reader
// never sees half a number).
//
// Usage: node mix_service.js PROGRESS [BUSY_MS] [PERIOD_MS]
'use strict';
const fs = require('fs');

const progress = process.argv[2];
const busyMs = Number(process.argv[3] || 25);
const periodMs = Number(process.argv[4] || 100);
let done = 0;

// One request: a document built, encoded, decoded, matched and sorted.
function request(n) {
  const doc = { id: n, items: [] };
  for (let i = 0; i < 64; i++) doc.items.push({ k: i, v: String((i * n) % 977) });
  const back = JSON.parse(JSON.stringify(doc));
  let hits = 0;
  for (const it of back.items) if (/^[1-4]\d*7$/.test(it.v)) hits++;
  back.items.sort((a, b) => (a.v < b.v ? -1 : a.v > b.v ? 1 : 0));
  return hits + back.items.length;
}

let sink = 0;
setInterval(() => {
  const end = Date.now() + busyMs;
  while (Date.now() < end) sink += request(done++);
}, periodMs);
setInterval(() => {
  fs.writeFileSync(progress + '.tmp', `${done}\n`);
  fs.renameSync(progress + '.tmp', progress);
}, 1000);
