// api.js: profd.v1.Profiler over grpc-web (application/grpc-web+proto) with
// fetch: request framing, unary calls, server streams read as they arrive,
// and gRPC statuses (from the headers of a trailers-only reply or from the
// trailer frame) turned into GrpcError. Every call carries the bearer token.

import * as pb from './proto.js';
import { Writer } from './proto.js';

const SERVICE = '/profd.v1.Profiler/';

export const CODES = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED',
  'NOT_FOUND', 'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED',
  'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED',
];

export class GrpcError extends Error {
  constructor(code, message) {
    super(`${CODES[code] || `status ${code}`}: ${message}`);
    this.code = code;
    this.codeName = CODES[code] || String(code);
    this.detail = message;
  }
}

function grpcMessage(raw) {
  if (!raw) return '';
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

// Headers of a trailers-only reply, or the trailer frame's text.
function statusOf(get) {
  const status = get('grpc-status');
  if (status === null || status === undefined || status === '') return null;
  return { code: Number(status), message: grpcMessage(get('grpc-message')) };
}

function trailerFields(bytes) {
  const fields = new Map();
  for (const line of new TextDecoder().decode(bytes).split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) fields.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
  }
  return (name) => (fields.has(name) ? fields.get(name) : null);
}

function frame(message) {
  const out = new Uint8Array(5 + message.length);
  new DataView(out.buffer).setUint32(1, message.length);
  out.set(message, 5);
  return out;
}

// A GetViewRequest's source: session_id (1), or query (7) with id 0.
function viewRequest(source) {
  if (typeof source === 'number') return new Writer().uint(1, source);
  return new Writer().message(7, pb.queryWriter(source));
}

export class Client {
  constructor(token, base = '') {
    this.token = token;
    this.base = base;
  }

  // Call `method` with the encoded request; `onMessage` gets each reply
  // message (bytes) as it arrives. Resolves once the call ended with OK.
  async call(method, request, onMessage, signal) {
    let res;
    try {
      res = await fetch(this.base + SERVICE + method, {
        method: 'POST',
        headers: {
          'content-type': 'application/grpc-web+proto',
          accept: 'application/grpc-web+proto',
          'x-grpc-web': '1',
          'x-user-agent': 'profd-dashboard/1',
          authorization: `Bearer ${this.token}`,
        },
        body: frame(request),
        signal,
        cache: 'no-store',
      });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new GrpcError(14, `cannot reach the daemon: ${e.message}`);
    }
    if (!res.ok) {
      throw new GrpcError(14, `the daemon answered HTTP ${res.status}`);
    }
    const early = statusOf((h) => res.headers.get(h));
    if (early && early.code !== 0) throw new GrpcError(early.code, early.message);
    const reader = res.body.getReader();
    let buf = new Uint8Array(0);
    let status = early;
    for (;;) {
      const { done, value } = await reader.read();
      if (value) {
        const joined = new Uint8Array(buf.length + value.length);
        joined.set(buf);
        joined.set(value, buf.length);
        buf = joined;
      }
      while (buf.length >= 5) {
        const len = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
        if (buf.length < 5 + len) break;
        const flags = buf[0];
        const body = buf.slice(5, 5 + len);
        buf = buf.slice(5 + len);
        if (flags & 0x80) {
          status = statusOf(trailerFields(body));
        } else {
          onMessage(body);
        }
      }
      if (done) break;
    }
    if (!status) throw new GrpcError(13, 'the reply ended without a gRPC status');
    if (status.code !== 0) throw new GrpcError(status.code, status.message);
  }

  async unary(method, request, schema) {
    let reply = null;
    await this.call(method, request, (bytes) => {
      reply = pb.decode(schema, bytes);
    });
    if (!reply) throw new GrpcError(13, `${method} returned no message`);
    return reply;
  }

  // This run's sessions and, kept in the state directory, earlier runs'.
  listSessions() {
    return this.unary('ListSessions', new Writer().uint(1, 1).finish(), pb.ListSessionsResponse);
  }

  // The profile of `source` (a session id or a query) as export `format`.
  profile(source, format) {
    const req = typeof source === 'number'
      ? new Writer().uint(1, source).uint(2, format)
      : new Writer().uint(2, format).message(3, pb.queryWriter(source));
    return this.unary('GetProfile', req.finish(), pb.GetProfileResponse);
  }

  attach(pid, seconds, mode) {
    const req = new Writer().uint(1, pid).uint(3, Math.round(seconds * 1000)).uint(8, mode || 0);
    return this.unary('Attach', req.finish(), pb.AttachResponse);
  }

  stop(sessionId) {
    return this.unary('Stop', new Writer().uint(1, sessionId).finish(), pb.StopResponse);
  }

  // The call tree top-down, leaving out nodes under `minPct` % of the
  // samples, of `source`: a session id, or a query of the continuous
  // history ({ fromUnixMs, toUnixMs, services, pids, by }).
  tree(source, minPct) {
    const tree = new Writer().double(2, minPct);
    const req = viewRequest(source).message(2, tree);
    return this.unary('GetView', req.finish(), pb.GetViewResponse);
  }

  callers(source, functionId) {
    const ref = new Writer().uint(1, functionId);
    const req = viewRequest(source).message(3, ref);
    return this.unary('GetView', req.finish(), pb.GetViewResponse);
  }

  // The continuous history's settings, windows and services over
  // [fromMs, toMs) (Unix ms; 0 = the oldest, and now).
  listWindows(fromMs, toMs) {
    const req = new Writer().uint(1, fromMs).uint(2, toMs);
    return this.unary('ListWindows', req.finish(), pb.ListWindowsResponse);
  }

  // One Watch stream: `onUpdate` gets each decoded WatchResponse.
  watch(sessionId, resumeAfterSeq, onUpdate, signal) {
    const req = new Writer().uint(1, sessionId).uint(2, 1000).uint(4, resumeAfterSeq);
    return this.call('Watch', req.finish(), (bytes) => onUpdate(pb.decode(pb.WatchResponse, bytes)), signal);
  }
}
