// proto.js: the protobuf wire format for the profd.v1 messages the
// dashboard uses: a writer for requests, a schema-driven reader for
// replies. Integers up to 2^53 are exact (sample counts, ids); int32 fields
// keep their sign.

const enc = new TextEncoder();
const dec = new TextDecoder();

// ---------------------------------------------------------------------------
// Writing

export class Writer {
  constructor() {
    this.bytes = [];
  }

  varint(n) {
    let v = Math.floor(n);
    while (v >= 0x80) {
      this.bytes.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    this.bytes.push(v);
    return this;
  }

  tag(field, wire) {
    return this.varint(field * 8 + wire);
  }

  // A varint field (uint32, uint64, bool, enum); zero is the default and is
  // left out, as proto3 does.
  uint(field, n) {
    if (n) this.tag(field, 0).varint(n);
    return this;
  }

  double(field, x) {
    if (x) {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setFloat64(0, x, true);
      this.tag(field, 1);
      this.bytes.push(...b);
    }
    return this;
  }

  bytesField(field, b) {
    this.tag(field, 2).varint(b.length);
    this.bytes.push(...b);
    return this;
  }

  string(field, s) {
    if (s) this.bytesField(field, enc.encode(s));
    return this;
  }

  // A nested message (sent even when empty: it selects a oneof case).
  message(field, writer) {
    return this.bytesField(field, writer.finish());
  }

  finish() {
    return Uint8Array.from(this.bytes);
  }
}

// ---------------------------------------------------------------------------
// Reading

class Reader {
  constructor(bytes) {
    this.b = bytes;
    this.pos = 0;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  // A varint: { value: exact up to 2^53, low: its low 32 bits }.
  varint() {
    let value = 0;
    let low = 0;
    let scale = 1;
    for (let shift = 0; shift < 70; shift += 7) {
      if (this.pos >= this.b.length) throw new Error('truncated varint');
      const byte = this.b[this.pos++];
      value += (byte & 0x7f) * scale;
      if (shift < 32) low |= (byte & 0x7f) << shift;
      scale *= 128;
      if (!(byte & 0x80)) return { value, low };
    }
    throw new Error('varint too long');
  }

  take(n) {
    if (this.pos + n > this.b.length) throw new Error('truncated field');
    const out = this.b.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  skip(wire) {
    switch (wire) {
      case 0: this.varint(); break;
      case 1: this.take(8); break;
      case 2: this.take(this.varint().value); break;
      case 5: this.take(4); break;
      default: throw new Error(`unsupported wire type ${wire}`);
    }
  }
}

// A schema maps field numbers to [name, type] or [name, type, 'repeated'],
// type being 'uint' (uint32/uint64/enum), 'int32', 'bool', 'double',
// 'string', 'bytes' or another schema (a message). Unknown fields are
// skipped. Missing fields read as their proto3 defaults.
export function decode(schema, bytes) {
  const out = {};
  for (const [name, type, repeated] of Object.values(schema)) {
    out[name] = repeated ? [] : defaultOf(type);
  }
  const r = new Reader(bytes);
  while (r.pos < r.b.length) {
    const key = r.varint().value;
    const field = Math.floor(key / 8);
    const wire = key % 8;
    const spec = schema[field];
    if (!spec) {
      r.skip(wire);
      continue;
    }
    const [name, type, repeated] = spec;
    const value = readValue(r, type, wire);
    if (repeated) out[name].push(value);
    else out[name] = value;
  }
  return out;
}

function defaultOf(type) {
  switch (type) {
    case 'uint': case 'int32': case 'double': return 0;
    case 'bool': return false;
    case 'string': return '';
    case 'bytes': return new Uint8Array(0);
    default: return null;
  }
}

function readValue(r, type, wire) {
  const expect = (w) => {
    if (wire !== w) throw new Error(`field has wire type ${wire}, expected ${w}`);
  };
  switch (type) {
    case 'uint': expect(0); return r.varint().value;
    case 'int32': expect(0); return r.varint().low | 0;
    case 'bool': expect(0); return r.varint().value !== 0;
    case 'double': {
      expect(1);
      const x = r.view.getFloat64(r.pos, true);
      r.take(8);
      return x;
    }
    case 'string': expect(2); return dec.decode(r.take(r.varint().value));
    case 'bytes': expect(2); return r.take(r.varint().value);
    default: expect(2); return decode(type, r.take(r.varint().value));
  }
}

// ---------------------------------------------------------------------------
// profd.v1 messages (field numbers from proto/profd/v1/profd.proto)

const TimeTotals = {
  1: ['onCpuNs', 'uint'],
  2: ['offCpuNs', 'uint'],
  3: ['runnableNs', 'uint'],
  4: ['waits', 'uint'],
  5: ['unpaired', 'uint'],
  6: ['openAtEnd', 'uint'],
};

export const Totals = {
  1: ['attributed', 'uint'],
  2: ['discarded', 'uint'],
  3: ['lost', 'uint'],
  4: ['truncated', 'uint'],
  5: ['unsymbolized', 'uint'],
  6: ['overflowed', 'uint'],
  7: ['throttled', 'uint'],
  8: ['unchecked', 'uint'],
  9: ['unsampled', 'uint'],
  10: ['time', TimeTotals],
};

export const Session = {
  1: ['id', 'uint'],
  2: ['pid', 'uint'],
  3: ['comm', 'string'],
  4: ['frequencyHz', 'uint'],
  5: ['event', 'uint'],
  6: ['state', 'uint'],
  7: ['startedUnixMs', 'uint'],
  8: ['durationS', 'double'],
  9: ['totals', Totals],
  10: ['durationLimitMs', 'uint'],
  11: ['error', 'string'],
  12: ['unwind', 'uint'],
  13: ['stackBytes', 'uint'],
  14: ['ownerUid', 'uint'],
  15: ['owner', 'string'],
  16: ['children', 'bool'],
  20: ['earlierRun', 'bool'],
  21: ['scope', 'uint'],
  23: ['mode', 'uint'],
};

export const Function = {
  1: ['id', 'uint'],
  2: ['name', 'string'],
  3: ['module', 'string'],
  4: ['inclusive', 'uint'],
  5: ['exclusive', 'uint'],
  6: ['inclusivePct', 'double'],
  7: ['exclusivePct', 'double'],
  8: ['inlined', 'bool'],
};

export const ListSessionsResponse = { 1: ['sessions', Session, 'repeated'] };
export const AttachResponse = { 1: ['session', Session] };
export const StopResponse = { 1: ['session', Session] };

export const WatchResponse = {
  1: ['seq', 'uint'],
  2: ['snapshot', 'bool'],
  3: ['session', Session],
  4: ['functions', Function, 'repeated'],
  5: ['final', 'bool'],
  7: ['resumed', 'bool'],
};

const TreeNode = {
  1: ['parent', 'int32'],
  2: ['depth', 'uint'],
  3: ['functionId', 'uint'],
  4: ['inclusive', 'uint'],
  5: ['exclusive', 'uint'],
};

const Edge = {
  1: ['functionId', 'uint'],
  2: ['inclusive', 'uint'],
  3: ['exclusive', 'uint'],
  4: ['inclusivePct', 'double'],
};

const CallerCallee = {
  1: ['function', Function],
  2: ['callers', Edge, 'repeated'],
  3: ['callees', Edge, 'repeated'],
};

export const GetViewResponse = {
  1: ['session', Session],
  2: ['functions', Function, 'repeated'],
  3: ['nodes', TreeNode, 'repeated'],
  4: ['callerCallee', CallerCallee],
  7: ['attributed', 'uint'],
};

export const GetProfileResponse = {
  1: ['session', Session],
  2: ['functions', Function, 'repeated'],
  3: ['data', 'bytes'],
};

// ExportFormat values, and the file names the dashboard gives them.
export const EXPORTS = [
  { format: 1, name: 'pprof', file: 'profile.pb.gz' },
  { format: 2, name: 'folded', file: 'profile.folded' },
  { format: 3, name: 'svg', file: 'flame.svg' },
  { format: 4, name: 'speedscope', file: 'profile.speedscope.json' },
  { format: 5, name: 'json', file: 'profile.json' },
];

// Continuous profiling (ListWindows). Times in ns exceed 2^53: they read
// to within a microsecond, enough to show them.
const ServiceSamples = {
  1: ['service', 'string'],
  2: ['samples', 'uint'],
};

const WindowSummary = {
  1: ['id', 'string'],
  2: ['startUnixNs', 'uint'],
  3: ['endUnixNs', 'uint'],
  4: ['totals', Totals],
  5: ['services', ServiceSamples, 'repeated'],
  6: ['bytes', 'uint'],
};

export const ListWindowsResponse = {
  1: ['enabled', 'bool'],
  2: ['frequencyHz', 'uint'],
  3: ['windowSeconds', 'uint'],
  4: ['retentionBytes', 'uint'],
  5: ['retentionS', 'uint'],
  6: ['host', 'string'],
  7: ['windowsKept', 'uint'],
  8: ['bytesKept', 'uint'],
  9: ['droppedBytes', 'uint'],
  10: ['droppedAge', 'uint'],
  11: ['damaged', 'uint'],
  12: ['windows', WindowSummary, 'repeated'],
  13: ['services', ServiceSamples, 'repeated'],
  14: ['windowsLeftOut', 'uint'],
};

// GroupBy, as Query.by takes it.
export const GROUP_BY = { none: 0, service: 1, process: 2, host: 3 };

// A profd.v1.Query: { fromUnixMs, toUnixMs, services: [], pids: [], by }.
export function queryWriter(q) {
  const w = new Writer().uint(1, q.fromUnixMs || 0).uint(2, q.toUnixMs || 0);
  for (const s of q.services || []) w.string(3, s);
  for (const pid of q.pids || []) w.uint(4, pid);
  return w.uint(5, q.by || 0);
}

// SessionState and enum names, as the API spells them.
export const STATES = ['unspecified', 'running', 'stopped', 'duration elapsed', 'exited', 'failed'];
export const EVENTS = ['unspecified', 'cpu-clock', 'cycles'];
export const UNWINDS = ['unspecified', 'auto', 'fp', 'dwarf'];
// Modes whose counts are nanoseconds.
export const TIMED = new Set([2, 3]);
export const RUNNING = 1;
