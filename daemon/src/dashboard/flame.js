// flame.js: a flame graph drawn as SVG from a GetView top-down call tree
// (nodes in depth-first order with parent indices): outermost frames at the
// bottom, each frame as wide as its inclusive samples.

import { TIMED } from './proto.js';

const SVG = 'http://www.w3.org/2000/svg';
const ROW = 18;
const CHAR = 7;

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

// Draw `view` (a GetViewResponse with a tree) into `container`, `width`
// pixels wide; `onSelect(functionId)` is called when a frame is clicked.
export function drawFlame(container, view, width, onSelect) {
  const names = new Map(view.functions.map((f) => [f.id, f.name]));
  const nodes = view.nodes;
  const total = Math.max(
    view.session?.totals?.attributed || 0,
    nodes.filter((n) => n.parent < 0).reduce((s, n) => s + n.inclusive, 0),
  );
  container.replaceChildren();
  if (!nodes.length || !total) {
    const p = document.createElement('p');
    p.className = 'empty';
    p.textContent = 'No samples yet.';
    container.append(p);
    return;
  }
  const depth = Math.max(...nodes.map((n) => n.depth)) + 1;
  const height = depth * ROW;
  const scale = width / total;
  // Off-cpu and wall profiles count nanoseconds.
  const timed = TIMED.has(view.session?.mode);
  const svg = el('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img' });
  const label = el('title', {});
  label.textContent = `Flame graph: outermost frames at the bottom, width = inclusive ${timed ? 'time' : 'samples'}`;
  svg.append(label);
  const x = new Array(nodes.length).fill(0);
  const nextChild = new Array(nodes.length).fill(0);
  let nextRoot = 0;
  nodes.forEach((n, i) => {
    if (n.parent < 0) {
      x[i] = nextRoot;
      nextRoot += n.inclusive;
    } else {
      x[i] = x[n.parent] + nextChild[n.parent];
      nextChild[n.parent] += n.inclusive;
    }
    const w = n.inclusive * scale;
    if (w < 0.5) return;
    const name = names.get(n.functionId) || `#${n.functionId}`;
    const g = el('g', { class: 'frame', 'data-id': n.functionId, 'data-name': name, 'data-depth': n.depth });
    const title = el('title', {});
    const pct = ((100 * n.inclusive) / total).toFixed(2);
    title.textContent = timed
      ? `${name}: ${(n.inclusive / 1e6).toFixed(1)} ms (${pct} %)`
      : `${name}: ${n.inclusive} samples (${pct} %)`;
    const y = height - (n.depth + 1) * ROW;
    g.append(title, el('rect', {
      x: (x[i] * scale).toFixed(2),
      y,
      width: Math.max(w - 0.5, 0.5).toFixed(2),
      height: ROW - 1,
      rx: 2,
      fill: colour(name),
    }));
    const fits = Math.floor((w - 6) / CHAR);
    if (fits >= 3) {
      const text = el('text', { x: (x[i] * scale + 3).toFixed(2), y: y + ROW - 5 });
      text.textContent = name.length <= fits ? name : `${name.slice(0, fits - 1)}…`;
      g.append(text);
    }
    g.addEventListener('click', () => onSelect(n.functionId));
    svg.append(g);
  });
  container.append(svg);
}
