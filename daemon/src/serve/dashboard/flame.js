// flame.js: a flame graph drawn as SVG from a GetView top-down call tree
// (nodes in depth-first order with parent indices): outermost frames at the
// bottom, each frame as wide as its inclusive samples. It zooms into one
// frame (its callers stay below at full width), marks the frames a search
// matches, and, given a base tree, colours each frame by how its share
// changed: red grew, blue shrank.

import { TIMED } from './proto.js';

const SVG = 'http://www.w3.org/2000/svg';
const ROW = 18;
const CHAR = 7;
// A change of this many points of the total is the deepest red or blue.
const FULL_CHANGE = 10;

function el(name, attrs) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// A warm colour that stays the same for a name.
function colour(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${h % 55}, ${70 + (h % 20)}%, ${55 + (h % 12)}%)`;
}

// Red for a share that grew by `points`, blue for one that shrank, grey
// for none; deeper as the change nears FULL_CHANGE.
function changeColour(points) {
  const depth = Math.min(Math.abs(points) / FULL_CHANGE, 1);
  const light = Math.round(92 - 40 * depth);
  if (Math.abs(points) < 0.05) return 'hsl(0, 0%, 85%)';
  return points > 0 ? `hsl(0, 80%, ${light}%)` : `hsl(215, 80%, ${light}%)`;
}

// Each node's path from the root: the names and modules of its frames
// (the same in two profiles, whose function ids differ).
export function paths(view) {
  const key = new Map(view.functions.map((f) => [f.id, `${f.name}\u0001${f.module}`]));
  const out = [];
  view.nodes.forEach((n, i) => {
    const k = key.get(n.functionId) || `#${n.functionId}`;
    out[i] = n.parent < 0 ? k : `${out[n.parent]}\u0000${k}`;
  });
  return out;
}

function totalOf(view) {
  return Math.max(
    view.attributed || 0,
    view.nodes.filter((n) => n.parent < 0).reduce((s, n) => s + n.inclusive, 0),
  );
}

// Draw `view` (a GetViewResponse with a tree) into `container`, `width`
// pixels wide. Options:
//   onClick(functionId, path)  a frame was clicked
//   zoom                       the path of the frame shown full width
//   search                     frames whose name holds it (any case) are
//                              marked `match`, the others `dim`
//   base                       a tree to compare with: frames coloured by
//                              the change of their share of the total
// Returns { matchedPct } (the share under matching frames, counted once).
export function drawFlame(container, view, width, options = {}) {
  const { onClick = () => {}, zoom = null, search = '', base = null } = options;
  const names = new Map(view.functions.map((f) => [f.id, f.name]));
  const nodes = view.nodes;
  const total = totalOf(view);
  container.replaceChildren();
  if (!nodes.length || !total) {
    const p = document.createElement('p');
    p.className = 'empty';
    p.textContent = 'No samples yet.';
    container.append(p);
    return { matchedPct: 0 };
  }
  const path = paths(view);
  // Zoomed: the frame's subtree spans the width, its callers below it.
  const z = zoom === null ? -1 : path.indexOf(zoom);
  const inZoom = new Array(nodes.length).fill(z < 0);
  const below = new Array(nodes.length).fill(false);
  if (z >= 0) {
    for (let a = z; a >= 0; a = nodes[a].parent) below[a] = true;
    nodes.forEach((n, i) => {
      inZoom[i] = i === z || (n.parent >= 0 && inZoom[n.parent] && i > z);
    });
  }
  const span = z >= 0 ? nodes[z].inclusive : total;
  const baseShare = new Map();
  if (base) {
    const bt = totalOf(base);
    paths(base).forEach((p, i) => baseShare.set(p, bt ? (100 * base.nodes[i].inclusive) / bt : 0));
  }
  const depth = Math.max(...nodes.map((n) => n.depth)) + 1;
  const height = depth * ROW;
  const scale = width / span;
  // Off-cpu and wall profiles count nanoseconds.
  const timed = TIMED.has(view.session?.mode);
  const svg = el('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img' });
  const label = el('title', {});
  label.textContent = `Flame graph: outermost frames at the bottom, width = inclusive ${timed ? 'time' : 'samples'}`;
  svg.append(label);
  const needle = search.toLowerCase();
  const matched = new Array(nodes.length).fill(false);
  let matchedSamples = 0;
  const x = new Array(nodes.length).fill(0);
  const nextChild = new Array(nodes.length).fill(0);
  let nextRoot = 0;
  nodes.forEach((n, i) => {
    const name = names.get(n.functionId) || `#${n.functionId}`;
    const hit = needle !== '' && name.toLowerCase().includes(needle);
    const underHit = n.parent >= 0 && matched[n.parent];
    matched[i] = hit || underHit;
    if (hit && !underHit) matchedSamples += n.inclusive;
    if (n.parent < 0) {
      x[i] = nextRoot;
      nextRoot += n.inclusive;
    } else {
      x[i] = x[n.parent] + nextChild[n.parent];
      nextChild[n.parent] += n.inclusive;
    }
    let left;
    let w;
    if (below[i]) {
      left = 0;
      w = width;
    } else if (inZoom[i]) {
      left = (x[i] - (z >= 0 ? x[z] : 0)) * scale;
      w = n.inclusive * scale;
    } else {
      return;
    }
    if (w < 0.5) return;
    const share = (100 * n.inclusive) / total;
    const g = el('g', {
      class: `frame${hit ? ' match' : needle ? ' dim' : ''}`,
      'data-id': n.functionId,
      'data-name': name,
      'data-depth': n.depth,
      'data-path': path[i],
    });
    const title = el('title', {});
    const pct = share.toFixed(2);
    let text = timed
      ? `${name}: ${(n.inclusive / 1e6).toFixed(1)} ms (${pct} %)`
      : `${name}: ${n.inclusive} samples (${pct} %)`;
    let fill = colour(name);
    if (base) {
      const change = share - (baseShare.get(path[i]) || 0);
      g.dataset.change = change.toFixed(2);
      text += `, ${change >= 0 ? '+' : ''}${change.toFixed(2)} points`;
      fill = changeColour(change);
    }
    title.textContent = text;
    const y = height - (n.depth + 1) * ROW;
    g.append(title, el('rect', {
      x: left.toFixed(2),
      y,
      width: Math.max(w - 0.5, 0.5).toFixed(2),
      height: ROW - 1,
      rx: 2,
      fill,
    }));
    const fits = Math.floor((w - 6) / CHAR);
    if (fits >= 3) {
      const label = el('text', { x: (left + 3).toFixed(2), y: y + ROW - 5 });
      label.textContent = name.length <= fits ? name : `${name.slice(0, fits - 1)}…`;
      g.append(label);
    }
    g.addEventListener('click', () => onClick(n.functionId, path[i]));
    svg.append(g);
  });
  container.append(svg);
  return { matchedPct: (100 * matchedSamples) / total };
}
