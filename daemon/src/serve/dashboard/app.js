// app.js: the dashboard page: sign-in with a bearer token (kept in
// sessionStorage), the session list, and for the session chosen a live
// function table from one Watch stream (snapshot, then deltas applied as
// docs/API.md says), its totals, a flame graph and callers/callees. The
// continuous profiling panel lists the services of a time range
// (ListWindows) and shows the merged profile of one or all of them with the
// same table, flame graph and callers/callees (GetView with a query).
// The flame graph zooms and searches, the table sorts and filters, every
// export downloads, and two sessions compare in a diff flame graph and a
// table of each function's counts in both.

import { Client, GrpcError } from './api.js';
import { drawFlame } from './flame.js';
import { STATES, EVENTS, TIMED, RUNNING, GROUP_BY, EXPORTS } from './proto.js';

const TOKEN_KEY = 'profd.token';
const SESSIONS_EVERY_MS = 2000;
const VIEWS_EVERY_MS = 5000;
const MAX_ROWS = 200;
// The most rows the diff table shows.
const MAX_DIFF_ROWS = 30;
const FLAME_MIN_PCT = 0.1;
const WATCH_RETRIES = 5;
const UNAUTHENTICATED = 16;
const UNAVAILABLE = 14;
const TOTALS = ['attributed', 'discarded', 'lost', 'truncated', 'unsymbolized', 'overflowed', 'throttled', 'unchecked', 'unsampled'];

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const state = {
  client: null,
  sessionsTimer: null,
  watch: null,
  selected: null,
  flameView: null,
  viewsTimer: null,
  // The flame graph's zoomed frame (its path) and search text.
  zoom: null,
  search: '',
  // The function table's order and name filter.
  sort: { key: 'exclusive', descending: true },
  filter: '',
  // The diff shown: { base, next } views, or null.
  diff: null,
};

function show(id, on) {
  $(id).hidden = !on;
}

function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function pctCell(pct) {
  const td = document.createElement('td');
  td.className = 'num pct';
  const bar = document.createElement('span');
  bar.className = 'bar';
  bar.style.width = `${Math.min(100, Math.max(0, pct))}%`;
  const v = document.createElement('span');
  v.className = 'v';
  v.textContent = pct.toFixed(2);
  td.append(bar, v);
  return td;
}

// A name of at most LONG_NAME characters: a longer one (a C++ signature)
// keeps its start and its end, where the method's name is; the whole
// name is the cell's tooltip.
const LONG_NAME = 90;

function shortName(name) {
  if (name.length <= LONG_NAME) return name;
  const tail = Math.floor(LONG_NAME / 2);
  return `${name.slice(0, LONG_NAME - tail - 1)}…${name.slice(name.length - tail)}`;
}

function nameCell(name, module) {
  const td = cell(shortName(name), 'name');
  td.title = name;
  if (module) {
    const m = document.createElement('span');
    m.className = 'module';
    m.textContent = module;
    td.append(m);
  }
  return td;
}

function fmt(n) {
  return n.toLocaleString('en-US');
}

// Totals that are nanoseconds in off-cpu and wall sessions.
const TIMED_TOTALS = new Set(['attributed', 'unsymbolized', 'overflowed', 'unchecked']);

// A time in nanoseconds, as a person reads it.
function fmtTime(ns) {
  if (ns >= 1e9) return `${(ns / 1e9).toFixed(2)} s`;
  if (ns >= 1e6) return `${(ns / 1e6).toFixed(1)} ms`;
  if (ns >= 1e3) return `${(ns / 1e3).toFixed(0)} µs`;
  return `${ns} ns`;
}

// A count of session `s`'s profile: samples, or in off-cpu and wall
// sessions nanoseconds.
function fmtCount(n, s) {
  return TIMED.has(s?.mode) ? fmtTime(n) : fmt(n);
}

// What a session's counts are.
function unit(s) {
  return TIMED.has(s?.mode) ? 'time' : 'samples';
}

// ---------------------------------------------------------------------------
// Errors and signing in and out

function showError(e) {
  if (e instanceof GrpcError && e.code === UNAUTHENTICATED) {
    signOut(e.message);
    return;
  }
  $('error').textContent = e.message;
  show('error', true);
}

function clearError() {
  show('error', false);
}

async function signIn(token) {
  const client = new Client(token);
  const reply = await client.listSessions();
  sessionStorage.setItem(TOKEN_KEY, token);
  state.client = client;
  show('login', false);
  show('login-error', false);
  show('app', true);
  show('logout', true);
  $('whoami').textContent = `signed in with a token of ${location.host}`;
  renderSessions(reply.sessions);
  state.sessionsTimer = setInterval(refreshSessions, SESSIONS_EVERY_MS);
  listServices();
  const wanted = Number(new URLSearchParams(location.hash.slice(1)).get('session'));
  if (wanted && reply.sessions.some((s) => s.id === wanted)) selectSession(wanted);
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  clearInterval(state.sessionsTimer);
  closeSession();
  state.client = null;
  show('app', false);
  show('logout', false);
  $('whoami').textContent = '';
  $('token').value = '';
  show('login', true);
  $('login-error').textContent = message || '';
  show('login-error', Boolean(message));
}

// ---------------------------------------------------------------------------
// Sessions

async function refreshSessions() {
  if (!state.client) return;
  try {
    renderSessions((await state.client.listSessions()).sessions);
  } catch (e) {
    showError(e);
  }
}

function renderSessions(sessions) {
  const body = $('sessions').tBodies[0];
  const rows = [...sessions].sort((a, b) => b.id - a.id).map((s) => {
    const tr = document.createElement('tr');
    tr.dataset.id = s.id;
    tr.dataset.state = STATES[s.state] || String(s.state);
    tr.dataset.earlier = Boolean(s.earlierRun);
    if (s.id === state.watch?.id) tr.className = 'selected';
    if (s.earlierRun) tr.classList.add('earlier');
    tr.append(
      cell(String(s.id)),
      cell(String(s.pid)),
      cell(s.comm),
      cell(s.earlierRun ? `${stateText(s)} (earlier run)` : stateText(s)),
      cell(s.owner),
      cell(fmtCount(s.totals?.attributed || 0, s), 'num'),
      cell(s.durationS.toFixed(1), 'num'),
    );
    tr.addEventListener('click', () => selectSession(s.id));
    return tr;
  });
  body.replaceChildren(...rows);
  show('no-sessions', rows.length === 0);
}

function stateText(s) {
  const name = STATES[s.state] || `state ${s.state}`;
  return s.error ? `${name}: ${s.error}` : name;
}

async function attach(event) {
  event.preventDefault();
  show('attach-error', false);
  try {
    const pid = Number($('attach-pid').value);
    const seconds = Number($('attach-seconds').value || 0);
    const reply = await state.client.attach(pid, seconds, Number($('attach-mode').value));
    await refreshSessions();
    selectSession(reply.session.id);
  } catch (e) {
    if (e instanceof GrpcError && e.code === UNAUTHENTICATED) return showError(e);
    $('attach-error').textContent = e.message;
    show('attach-error', true);
  }
}

// ---------------------------------------------------------------------------
// One session: the Watch stream and the table

function selectSession(id) {
  if (state.watch?.id === id) return;
  closeSession();
  clearError();
  history.replaceState(null, '', `#session=${id}`);
  for (const tr of $('sessions').tBodies[0].rows) {
    tr.classList.toggle('selected', Number(tr.dataset.id) === id);
  }
  const watch = {
    id,
    names: new Map(),
    counts: new Map(),
    seq: 0,
    updates: 0,
    session: null,
    final: false,
    abort: new AbortController(),
  };
  state.watch = watch;
  state.selected = null;
  state.flameView = null;
  state.zoom = null;
  $('session-title').textContent = `Session ${id}`;
  $('functions').tBodies[0].replaceChildren();
  $('flame').replaceChildren();
  $('status').textContent = 'connecting…';
  show('callers-panel', false);
  show('session-panel', true);
  runWatch(watch);
  refreshViews();
  state.viewsTimer = setInterval(refreshViews, VIEWS_EVERY_MS);
}

function closeSession() {
  if (state.watch) state.watch.abort.abort();
  state.watch = null;
  state.diff = null;
  show('diff-panel', false);
  clearInterval(state.viewsTimer);
  show('session-panel', false);
}

// Keep one Watch stream open; after a broken connection resume from the
// last seq received (up to WATCH_RETRIES times in a row).
async function runWatch(watch) {
  let failures = 0;
  while (state.watch === watch && !watch.final) {
    const before = watch.updates;
    try {
      await state.client.watch(watch.id, watch.seq, (u) => applyUpdate(watch, u), watch.abort.signal);
      if (!watch.final) throw new GrpcError(UNAVAILABLE, 'the stream ended before the session did');
    } catch (e) {
      if (watch.abort.signal.aborted || state.watch !== watch) return;
      const transient = !(e instanceof GrpcError) || e.code === UNAVAILABLE;
      if (watch.updates > before) failures = 0;
      if (!transient || ++failures > WATCH_RETRIES) {
        showError(e);
        $('status').textContent = 'not updating';
        return;
      }
      $('status').textContent = `reconnecting (${failures})…`;
      await sleep(1000);
    }
  }
}

// docs/API.md, "Watch": names come once per id; every update brings the
// functions whose counts changed; percentages follow the totals.
function applyUpdate(watch, u) {
  if (state.watch !== watch) return;
  if (u.snapshot) watch.counts.clear();
  for (const f of u.functions) {
    if (f.name) watch.names.set(f.id, { name: f.name, module: f.module, inlined: f.inlined });
    watch.counts.set(f.id, { inclusive: f.inclusive, exclusive: f.exclusive });
  }
  watch.seq = u.seq;
  watch.session = u.session;
  watch.final = u.final;
  watch.updates += 1;
  renderSession(watch);
  if (u.final) {
    refreshViews();
    refreshSessions();
  }
}

function functionName(watch, id) {
  return watch.names.get(id)?.name || `#${id}`;
}

function renderSession(watch) {
  const s = watch.session;
  const totals = s?.totals || {};
  for (const key of TOTALS) {
    const n = totals[key] || 0;
    document.querySelector(`#totals [data-total="${key}"]`).textContent =
      TIMED_TOTALS.has(key) ? fmtCount(n, s) : fmt(n);
  }
  const t = totals.time;
  show('time-totals', Boolean(t));
  if (t) {
    $('time-totals').textContent =
      `on-CPU ${fmtTime(t.onCpuNs || 0)}, off-CPU ${fmtTime(t.offCpuNs || 0)} ` +
      `(runnable ${fmtTime(t.runnableNs || 0)}) in ${fmt(t.waits || 0)} waits; ` +
      `${fmt(t.unpaired || 0)} switches unpaired, ${fmt(t.openAtEnd || 0)} waits open at the end`;
  }
  if (s && watch.query) {
    const event = EVENTS[s.event] || `event ${s.event}`;
    $('session-title').textContent = `Continuous: ${watch.label}, ${event} at ${s.frequencyHz} Hz`;
    show('stop', false);
  } else if (s) {
    const event = EVENTS[s.event] || `event ${s.event}`;
    const what = s.mode === 2 ? 'off-CPU time' :
      `${event} at ${s.frequencyHz} Hz${s.mode === 3 ? ' + off-CPU time (wall)' : ''}`;
    $('session-title').textContent =
      `Session ${s.id}: pid ${s.pid} (${s.comm}), ${what}, ${stateText(s)}`;
    show('stop', s.state === RUNNING);
  }
  const time = new Date().toLocaleTimeString('en-GB');
  if (watch.query) {
    const from = s?.startedUnixMs ? new Date(s.startedUnixMs).toLocaleString('en-GB') : '—';
    $('status').textContent = `${s?.durationS.toFixed(0)} s of windows from ${from}`;
  } else {
    $('status').textContent = watch.final
      ? `ended; ${s?.durationS.toFixed(1)} s sampled`
      : `live, updated ${time} (seq ${watch.seq}, ${s?.durationS.toFixed(1)} s)`;
  }
  const total = totals.attributed || 0;
  const name = (id) => watch.names.get(id)?.name || `#${id}`;
  const needle = state.filter.toLowerCase();
  const { key, descending } = state.sort;
  const order = key === 'name'
    ? (a, b) => (name(a[0]) < name(b[0]) ? -1 : name(a[0]) > name(b[0]) ? 1 : 0)
    : (a, b) => a[1][key] - b[1][key];
  const rows = [...watch.counts.entries()]
    .filter(([id]) => !needle || name(id).toLowerCase().includes(needle))
    .sort((a, b) => (descending ? -order(a, b) : order(a, b))
      || b[1].inclusive - a[1].inclusive || b[1].exclusive - a[1].exclusive || a[0] - b[0]);
  for (const th of $('functions').tHead.rows[0].cells) {
    th.classList.toggle('sorted', th.dataset.sort === key);
    th.dataset.descending = descending;
  }
  const shown = rows.slice(0, MAX_ROWS).map(([id, c]) => {
    const info = watch.names.get(id) || { name: `#${id}`, module: '' };
    const tr = document.createElement('tr');
    tr.dataset.id = id;
    tr.dataset.name = info.name;
    tr.dataset.module = info.module;
    tr.dataset.inlined = Boolean(info.inlined);
    tr.dataset.inclusive = c.inclusive;
    tr.dataset.exclusive = c.exclusive;
    if (id === state.selected) tr.className = 'selected';
    const name = info.inlined ? `${info.name} [inlined]` : info.name;
    tr.append(
      nameCell(name, info.module),
      cell(fmtCount(c.inclusive, s), 'num'),
      pctCell(total ? (100 * c.inclusive) / total : 0),
      cell(fmtCount(c.exclusive, s), 'num'),
      pctCell(total ? (100 * c.exclusive) / total : 0),
    );
    tr.addEventListener('click', () => selectFunction(id));
    return tr;
  });
  $('functions').tBodies[0].replaceChildren(...shown);
  $('more-rows').textContent = `${rows.length - shown.length} more functions not shown.`;
  $('functions').dataset.unit = unit(s);
  show('more-rows', rows.length > shown.length);
}

// ---------------------------------------------------------------------------
// Flame graph and callers/callees (GetView)

async function refreshViews() {
  const watch = state.watch;
  if (!watch || watch.refreshing) return;
  if (watch.viewsDone) return;
  watch.refreshing = true;
  try {
    const ended = watch.final;
    const view = await state.client.tree(watch.id, FLAME_MIN_PCT);
    if (state.watch !== watch) return;
    state.flameView = view;
    drawCurrentFlame();
    if (state.selected !== null) await loadCallers(state.selected);
    if (ended || view.session?.state !== RUNNING) watch.viewsDone = true;
  } catch (e) {
    if (state.watch === watch) showError(e);
  } finally {
    watch.refreshing = false;
  }
}

function drawCurrentFlame() {
  if (!state.flameView) return;
  const box = $('flame');
  const { matchedPct } = drawFlame(box, state.flameView, box.clientWidth || 800, {
    onClick: (id, path) => {
      state.zoom = path;
      drawCurrentFlame();
      selectFunction(id);
    },
    zoom: state.zoom,
    search: state.search,
  });
  show('flame-reset', state.zoom !== null);
  $('flame-matched').textContent = state.search ? `${matchedPct.toFixed(1)} % of the ${unit(state.flameView.session)} match` : '';
  markSelectedFrames();
}

// ---------------------------------------------------------------------------
// Downloads: every export of what the panel shows (GetProfile with a format)

async function download(format) {
  const watch = state.watch;
  const e = EXPORTS.find((x) => x.format === format);
  if (!watch || !e) return;
  try {
    const reply = await state.client.profile(watch.query || watch.id, format);
    const what = watch.query ? 'continuous' : `session-${watch.id}`;
    const url = URL.createObjectURL(new Blob([reply.data]));
    const a = document.createElement('a');
    a.href = url;
    a.download = `${what}-${e.file}`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (err) {
    showError(err);
  }
}

// ---------------------------------------------------------------------------
// Diff: the new session's flame graph coloured by change against the base,
// and each function's samples (or time) in both, per second when the
// sessions' durations differ, biggest change first, as `profctl diff`

// Durations further apart than this (a fraction of the longer) are
// compared per second.
const RATE_WHEN_APART = 0.05;
// Below this share of a side's samples in functions both sides have, the
// two are said to be hardly the same program.
const SHARED_AT_LEAST = 0.2;
// Mode names by value (unspecified is cpu).
const MODES = ['cpu', 'cpu', 'off-cpu', 'wall'];
const modeOf = (s) => s?.mode || 1;

async function compare(event) {
  event?.preventDefault();
  show('diff-error', false);
  const baseId = Number($('diff-base').value);
  const newId = Number($('diff-new').value);
  try {
    const [base, next, baseAll, nextAll] = await Promise.all([
      state.client.tree(baseId, FLAME_MIN_PCT),
      state.client.tree(newId, FLAME_MIN_PCT),
      state.client.profile(baseId, 0),
      state.client.profile(newId, 0),
    ]);
    const [bm, nm] = [modeOf(baseAll.session), modeOf(nextAll.session)];
    if (TIMED.has(bm) !== TIMED.has(nm) || (TIMED.has(bm) && bm !== nm)) {
      throw new Error(`session ${baseId} is ${MODES[bm]} and session ${newId} is ${MODES[nm]}: `
        + 'compare profiles of the same kind');
    }
    closeSession();
    state.diff = { base, next, baseAll, nextAll, baseId, newId };
    $('diff-title').textContent = `Session ${newId} against session ${baseId}`;
    show('diff-panel', true);
    drawDiff();
  } catch (e) {
    if (e instanceof GrpcError && e.code === UNAUTHENTICATED) return showError(e);
    $('diff-error').textContent = e.message;
    show('diff-error', true);
  }
}

// A side's functions by name and whether inlined (so that they match
// across builds whatever their ids or module files): exclusive and
// inclusive counts, and the module with most exclusive samples.
function diffCounts(reply) {
  const m = new Map();
  for (const f of reply.functions) {
    const k = `${f.name}\u0000${Boolean(f.inlined)}`;
    const c = m.get(k) || { name: f.name, inlined: Boolean(f.inlined), exclusive: 0, inclusive: 0 };
    c.exclusive += f.exclusive;
    c.inclusive += f.inclusive;
    if (c.moduleExclusive === undefined || f.exclusive > c.moduleExclusive) {
      c.module = f.module;
      c.moduleExclusive = f.exclusive;
    }
    m.set(k, c);
  }
  return m;
}

// Why two sessions may not compare, one line each.
function diffWarnings(d, b, n) {
  const [bs, ns] = [d.baseAll.session || {}, d.nextAll.session || {}];
  const [bl, nl] = [`session ${d.baseId}`, `session ${d.newId}`];
  const out = [];
  if (modeOf(bs) !== modeOf(ns)) {
    out.push(`${bl} is a ${MODES[modeOf(bs)]} profile and ${nl} a ${MODES[modeOf(ns)]} one`);
  }
  if ((bs.event || 0) !== (ns.event || 0)) {
    out.push(`${bl} sampled ${EVENTS[bs.event || 0]} and ${nl} ${EVENTS[ns.event || 0]}`);
  }
  if (bs.frequencyHz && ns.frequencyHz && bs.frequencyHz !== ns.frequencyHz) {
    out.push(`${bl} sampled at ${bs.frequencyHz} Hz and ${nl} at ${ns.frequencyHz} Hz: `
      + 'compare their per-second rates, not counts');
  }
  const shared = (mine, theirs) => {
    let all = 0;
    let both = 0;
    for (const [k, c] of mine) {
      all += c.exclusive;
      if (theirs.has(k)) both += c.exclusive;
    }
    return all ? both / all : null;
  };
  const [sb, sn] = [shared(b, n), shared(n, b)];
  if (sb !== null && sn !== null && (sb < SHARED_AT_LEAST || sn < SHARED_AT_LEAST)) {
    out.push(`the functions both sessions have hold ${(sb * 100).toFixed(0)} % of ${bl}'s samples `
      + `and ${(sn * 100).toFixed(0)} % of ${nl}'s: they are hardly the same program`);
  }
  return out;
}

function drawDiff() {
  const d = state.diff;
  if (!d) return;
  const box = $('diff-flame');
  drawFlame(box, d.next, box.clientWidth || 800, { base: d.base });
  const [bs, ns] = [d.baseAll.session || {}, d.nextAll.session || {}];
  const [bd, nd] = [bs.durationS || 0, ns.durationS || 0];
  const rates = bd > 0 && nd > 0 && Math.abs(bd - nd) > RATE_WHEN_APART * Math.max(bd, nd);
  const per = (v, dur) => (rates ? v / dur : v);
  const [bt, nt] = [bs.totals?.attributed || 0, ns.totals?.attributed || 0];
  const share = (v, total) => (total ? (100 * v) / total : 0);
  const b = diffCounts(d.baseAll);
  const n = diffCounts(d.nextAll);
  const zero = { exclusive: 0, inclusive: 0 };
  const rows = [...new Set([...b.keys(), ...n.keys()])].map((k) => {
    const [x, y] = [b.get(k) || zero, n.get(k) || zero];
    const named = n.get(k) || b.get(k);
    const row = {
      name: named.name,
      inlined: named.inlined,
      module: named.module,
      base: [per(x.exclusive, bd), per(x.inclusive, bd)],
      next: [per(y.exclusive, nd), per(y.inclusive, nd)],
      share: share(y.exclusive, nt) - share(x.exclusive, bt),
    };
    row.change = [row.next[0] - row.base[0], row.next[1] - row.base[1]];
    return row;
  }).sort((p, q) => Math.abs(q.change[0]) - Math.abs(p.change[0])
    || Math.abs(q.change[1]) - Math.abs(p.change[1])
    || (p.name < q.name ? -1 : p.name > q.name ? 1 : 0));
  const timed = TIMED.has(ns.mode);
  const value = (v) => {
    if (timed) return fmtTime(Math.round(v));
    return rates ? v.toFixed(1) : fmt(Math.round(v));
  };
  const change = (v) => (v === 0 ? '0' : `${v < 0 ? '−' : '+'}${value(Math.abs(v))}`);
  const unitName = timed ? 'time' : 'samples';
  const side = (label, s, id) => `${label}: session ${id} (pid ${s.pid}, ${s.comm || '?'}) — `
    + `${fmtCount(s.totals?.attributed || 0, s)} attributed in ${(s.durationS || 0).toFixed(2)} s`;
  $('diff-sides').replaceChildren(
    ...[side('Base', bs, d.baseId), side('New', ns, d.newId)].map((t) => {
      const li = document.createElement('li');
      li.textContent = t;
      return li;
    }),
  );
  $('diff-unit').textContent = rates
    ? `${unitName} per second: the sessions' durations differ (${bd.toFixed(2)} s and ${nd.toFixed(2)} s)`
    : unitName;
  $('diff-unit').dataset.rates = rates;
  const warnings = diffWarnings(d, b, n);
  $('diff-warnings').replaceChildren(...warnings.map((w) => {
    const li = document.createElement('li');
    li.textContent = w;
    return li;
  }));
  show('diff-warnings', warnings.length > 0);
  const moved = (r) => r.change[0] !== 0 || r.change[1] !== 0 || Math.abs(r.share) >= 0.05;
  const trs = rows.filter(moved).slice(0, MAX_DIFF_ROWS).map((r) => {
    const tr = document.createElement('tr');
    tr.dataset.name = r.name;
    tr.dataset.inlined = r.inlined;
    tr.dataset.baseExclusive = r.base[0];
    tr.dataset.newExclusive = r.next[0];
    tr.dataset.baseInclusive = r.base[1];
    tr.dataset.newInclusive = r.next[1];
    tr.dataset.change = r.change[0];
    tr.dataset.share = r.share.toFixed(2);
    tr.className = r.change[0] > 0 ? 'grew' : r.change[0] < 0 ? 'shrank' : '';
    tr.append(
      nameCell(r.inlined ? `${r.name} [inlined]` : r.name, r.module),
      cell(value(r.base[0]), 'num'),
      cell(value(r.next[0]), 'num'),
      cell(change(r.change[0]), 'num'),
      cell(value(r.base[1]), 'num'),
      cell(value(r.next[1]), 'num'),
      cell(change(r.change[1]), 'num'),
      cell(`${r.share >= 0 ? '+' : '−'}${Math.abs(r.share).toFixed(1)}`, 'num'),
    );
    return tr;
  });
  $('diff-table').tBodies[0].replaceChildren(...trs);
}

function markSelectedFrames() {
  for (const g of document.querySelectorAll('#flame .frame')) {
    g.classList.toggle('selected', Number(g.dataset.id) === state.selected);
  }
}

async function selectFunction(id) {
  state.selected = id;
  for (const tr of $('functions').tBodies[0].rows) {
    tr.classList.toggle('selected', Number(tr.dataset.id) === id);
  }
  markSelectedFrames();
  try {
    await loadCallers(id);
  } catch (e) {
    showError(e);
  }
}

async function loadCallers(id) {
  const watch = state.watch;
  const view = await state.client.callers(watch.query || watch.id, id);
  if (state.watch !== watch || state.selected !== id) return;
  const names = new Map(view.functions.map((f) => [f.id, f]));
  const cc = view.callerCallee;
  const f = cc?.function;
  $('callers-title').textContent = f
    ? `${f.name}: ${fmtCount(f.inclusive, view.session)} ${TIMED.has(view.session?.mode) ? '' : 'samples '}inclusive (${f.inclusivePct.toFixed(2)} %), ${fmtCount(f.exclusive, view.session)} exclusive`
    : functionName(watch, id);
  const edgeRows = (edges) => edges.map((e) => {
    const other = names.get(e.functionId);
    const name = other?.name || functionName(watch, e.functionId);
    const tr = document.createElement('tr');
    tr.dataset.id = e.functionId;
    tr.dataset.name = name;
    tr.dataset.inclusive = e.inclusive;
    tr.append(nameCell(name, other?.module), cell(fmtCount(e.inclusive, view.session), 'num'), pctCell(e.inclusivePct));
    tr.addEventListener('click', () => selectFunction(e.functionId));
    return tr;
  });
  const empty = (what) => {
    const tr = document.createElement('tr');
    tr.className = 'none';
    tr.append(cell(what));
    return [tr];
  };
  const callers = cc?.callers || [];
  const callees = cc?.callees || [];
  $('callers').tBodies[0].replaceChildren(...(callers.length ? edgeRows(callers) : empty('none: an outermost frame')));
  $('callees').tBodies[0].replaceChildren(...(callees.length ? edgeRows(callees) : empty('none: it calls nothing sampled')));
  show('callers-panel', true);
}

// ---------------------------------------------------------------------------
// Continuous profiling: the services of a range, and a merged profile

// The range chosen, in Unix ms ([0, 0] = the whole history).
function continuousRange() {
  const choice = $('continuous-range').value;
  if (choice !== 'custom') {
    return { fromUnixMs: Date.now() - Number(choice) * 1000, toUnixMs: 0, label: $('continuous-range').selectedOptions[0].textContent };
  }
  const from = $('continuous-from').value ? new Date($('continuous-from').value).getTime() : 0;
  const to = $('continuous-to').value ? new Date($('continuous-to').value).getTime() : 0;
  const label = `${from ? new Date(from).toLocaleString('en-GB') : 'the oldest window'} to ${to ? new Date(to).toLocaleString('en-GB') : 'now'}`;
  return { fromUnixMs: from, toUnixMs: to, label };
}

async function listServices(event) {
  event?.preventDefault();
  if (!state.client) return;
  const range = continuousRange();
  let list;
  try {
    list = await state.client.listWindows(range.fromUnixMs, range.toUnixMs);
  } catch (e) {
    if (e instanceof GrpcError && e.code === UNAUTHENTICATED) return showError(e);
    // Off in this daemon, or not root: say why, in place of the panel.
    $('continuous-error').textContent = e instanceof GrpcError ? e.detail : e.message;
    show('continuous-error', true);
    show('services', false);
    show('no-windows', false);
    $('continuous-summary').textContent = '';
    return;
  }
  show('continuous-error', false);
  $('continuous-summary').textContent =
    `${list.host}: ${list.frequencyHz} Hz, windows of ${list.windowSeconds} s; ` +
    `${fmt(list.windows.length + list.windowsLeftOut)} windows in the range, ${fmt(list.windowsKept)} kept`;
  const total = list.services.reduce((n, s) => n + s.samples, 0);
  const row = (name, samples, services) => {
    const tr = document.createElement('tr');
    tr.dataset.service = services.join(',');
    tr.append(cell(name, 'name'), cell(fmt(samples), 'num'), pctCell(total ? (100 * samples) / total : 0));
    tr.addEventListener('click', () => {
      for (const r of $('services').tBodies[0].rows) r.classList.toggle('selected', r === tr);
      const label = `${services.length ? services[0] : 'all services'}, ${range.label}`;
      selectContinuous({ fromUnixMs: range.fromUnixMs, toUnixMs: range.toUnixMs, services, by: services.length ? GROUP_BY.none : GROUP_BY.service }, label);
    });
    return tr;
  };
  const rows = list.services.map((s) => row(s.service, s.samples, [s.service]));
  if (rows.length) rows.unshift(row('all services', total, []));
  $('services').tBodies[0].replaceChildren(...rows);
  show('services', rows.length > 0);
  show('no-windows', rows.length === 0);
}

// Show the merged profile of `query` in the session panel: table, totals,
// flame graph and callers/callees, from one GetView tree.
async function selectContinuous(query, label) {
  closeSession();
  clearError();
  for (const tr of $('sessions').tBodies[0].rows) tr.classList.remove('selected');
  const watch = {
    id: 0,
    query,
    label,
    names: new Map(),
    counts: new Map(),
    seq: 0,
    updates: 0,
    session: null,
    final: true,
    viewsDone: true,
    abort: new AbortController(),
  };
  state.watch = watch;
  state.selected = null;
  state.flameView = null;
  state.zoom = null;
  $('session-title').textContent = `Continuous: ${label}`;
  $('functions').tBodies[0].replaceChildren();
  $('flame').replaceChildren();
  $('status').textContent = 'reading the history…';
  show('stop', false);
  show('callers-panel', false);
  show('session-panel', true);
  try {
    const view = await state.client.tree(query, FLAME_MIN_PCT);
    if (state.watch !== watch) return;
    for (const f of view.functions) {
      watch.names.set(f.id, { name: f.name, module: f.module, inlined: f.inlined });
      watch.counts.set(f.id, { inclusive: f.inclusive, exclusive: f.exclusive });
    }
    watch.session = view.session;
    renderSession(watch);
    state.flameView = view;
    drawCurrentFlame();
  } catch (e) {
    if (state.watch === watch) {
      showError(e);
      $('status').textContent = '';
    }
  }
}

// ---------------------------------------------------------------------------
// Start

function start() {
  $('login-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    show('login-error', false);
    const token = $('token').value.trim();
    try {
      await signIn(token);
    } catch (e) {
      $('login-error').textContent = e.message;
      show('login-error', true);
    }
  });
  $('logout').addEventListener('click', () => signOut());
  $('attach-form').addEventListener('submit', attach);
  $('continuous-form').addEventListener('submit', listServices);
  $('continuous-range').addEventListener('change', () => {
    show('continuous-custom', $('continuous-range').value === 'custom');
    if ($('continuous-range').value !== 'custom') listServices();
  });
  $('stop').addEventListener('click', async () => {
    try {
      if (state.watch) await state.client.stop(state.watch.id);
    } catch (e) {
      showError(e);
    }
  });
  $('diff-form').addEventListener('submit', compare);
  $('flame-search').addEventListener('input', () => {
    state.search = $('flame-search').value.trim();
    drawCurrentFlame();
  });
  $('flame-reset').addEventListener('click', () => {
    state.zoom = null;
    drawCurrentFlame();
  });
  $('functions-filter').addEventListener('input', () => {
    state.filter = $('functions-filter').value.trim();
    if (state.watch) renderSession(state.watch);
  });
  for (const th of $('functions').tHead.rows[0].cells) {
    if (!th.dataset.sort) continue;
    th.addEventListener('click', () => {
      const key = th.dataset.sort;
      state.sort = { key, descending: state.sort.key === key ? !state.sort.descending : key !== 'name' };
      if (state.watch) renderSession(state.watch);
    });
  }
  for (const e of EXPORTS) {
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.format = e.name;
    b.textContent = e.name;
    b.addEventListener('click', () => download(e.format));
    $('downloads').append(b);
  }
  let resize = null;
  window.addEventListener('resize', () => {
    clearTimeout(resize);
    resize = setTimeout(() => {
      drawCurrentFlame();
      drawDiff();
    }, 150);
  });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) {
    signIn(saved).catch((e) => signOut(e.message));
  } else {
    signOut();
  }
}

start();
