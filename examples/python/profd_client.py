#!/usr/bin/env python3
"""A profd client in Python: lists sessions, starts one, and watches one live.

It speaks the public profd.v1 gRPC API (proto/profd/v1/profd.proto) with
grpcio; the Python stubs are generated from the proto at start-up with
grpcio-tools, into a temporary directory, so nothing generated is kept.

Over the Unix socket (the caller's uid decides what it may see and profile):

    profd_client.py --socket /run/profd/profd.sock list
    profd_client.py attach 1234 --seconds 10
    profd_client.py watch 7 --updates 5

Over the TLS listener (profd --listen ... --tokens ...), with a bearer token:

    profd_client.py --connect profd.example:7070 --tls-ca ca.pem \\
        --token-file ~/.config/profd/token list

`watch` keeps the client-side table the way the API asks: the first update
is a snapshot of every function; later ones carry only the functions whose
counts changed, with names only the first time an id is sent, and the
totals. Percentages are recomputed from the counts and the totals.
"""

import argparse
import importlib
import os
import sys
import tempfile

import grpc
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "proto")
DEFAULT_SOCKET = "/run/profd/profd.sock"


def load_stubs(proto_dir=PROTO_DIR):
    """Generate and import the profd.v1 message and service modules."""
    out = tempfile.mkdtemp(prefix="profd-stubs-")
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{os.path.abspath(proto_dir)}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            "profd/v1/profd.proto",
        ]
    )
    if status != 0:
        sys.exit(f"protoc failed on {proto_dir}/profd/v1/profd.proto")
    sys.path.insert(0, out)
    pb = importlib.import_module("profd.v1.profd_pb2")
    rpc = importlib.import_module("profd.v1.profd_pb2_grpc")
    return pb, rpc


class Token(grpc.AuthMetadataPlugin):
    """Sends `authorization: Bearer <token>` with every call."""

    def __init__(self, token):
        self.token = token

    def __call__(self, context, callback):
        callback((("authorization", f"Bearer {self.token}"),), None)


def channel(args):
    """A channel to the Unix socket, or to the TLS listener with a token."""
    if not args.connect:
        # grpc-core would send the socket path, percent-encoded, as the
        # :authority, which HTTP/2 servers such as profd's refuse.
        options = [("grpc.default_authority", "localhost")]
        return grpc.insecure_channel(f"unix:{os.path.abspath(args.socket)}", options=options)
    if not args.tls_ca or not args.token_file:
        sys.exit("--connect needs --tls-ca and --token-file (the listener is TLS only)")
    with open(args.tls_ca, "rb") as f:
        tls = grpc.ssl_channel_credentials(root_certificates=f.read())
    with open(args.token_file, encoding="utf-8") as f:
        token = f.read().strip()
    creds = grpc.composite_channel_credentials(tls, grpc.metadata_call_credentials(Token(token)))
    options = []
    if args.tls_domain:
        options.append(("grpc.ssl_target_name_override", args.tls_domain))
    return grpc.secure_channel(args.connect, creds, options=options)


def state_name(pb, state):
    return pb.SessionState.Name(state).removeprefix("SESSION_STATE_").lower()


def print_sessions(pb, sessions):
    print(f"{'ID':>4}  {'PID':>7}  {'COMM':<16} {'OWNER':<10} {'STATE':<17} {'SAMPLES':>8}")
    for s in sessions:
        print(
            f"{s.id:>4}  {s.pid:>7}  {s.comm:<16} {s.owner:<10} "
            f"{state_name(pb, s.state):<17} {s.totals.attributed:>8}"
        )


def print_update(pb, update, names, counts, top):
    s = update.session
    t = s.totals
    kind = "snapshot" if update.snapshot else "final" if update.final else "update"
    print(
        f"seq {update.seq} ({kind}) session {s.id} pid {s.pid} ({s.comm}) "
        f"{state_name(pb, s.state)}: attributed {t.attributed} discarded {t.discarded} lost {t.lost}"
    )
    rows = sorted(counts.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))[:top]
    total = t.attributed or 1
    print(f"  {'INCL%':>6} {'EXCL%':>6}  FUNCTION")
    for fid, (incl, excl) in rows:
        name, module = names.get(fid, (f"#{fid}", "?"))
        print(f"  {100 * incl / total:6.2f} {100 * excl / total:6.2f}  {name} [{module}]")
    sys.stdout.flush()


def watch(pb, stub, session_id, updates, interval_ms, top):
    """Follow one session; returns the number of updates printed."""
    names, counts, n = {}, {}, 0
    request = pb.WatchRequest(session_id=session_id, interval_ms=interval_ms)
    for update in stub.Watch(request):
        for f in update.functions:
            if f.name:
                names[f.id] = (f.name, f.module)
            counts[f.id] = (f.inclusive, f.exclusive)
        print_update(pb, update, names, counts, top)
        n += 1
        if update.final or (updates and n >= updates):
            break
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", default=os.environ.get("PROFD_SOCKET", DEFAULT_SOCKET))
    p.add_argument("--connect", metavar="HOST:PORT", help="the TLS listener instead of the socket")
    p.add_argument("--tls-ca", metavar="PEM", help="CA certificate the listener's is checked against")
    p.add_argument("--tls-domain", metavar="NAME", help="name expected in the listener's certificate")
    p.add_argument("--token-file", metavar="FILE", help="file holding the bearer token")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="sessions (--all: every caller's, root only)")
    ls.add_argument("--all", action="store_true")
    at = sub.add_parser("attach", help="profile PID and watch it until the session ends")
    at.add_argument("pid", type=int)
    at.add_argument("--seconds", type=float, default=5.0)
    at.add_argument("--frequency", type=int, default=999)
    for cmd in (at, sub.add_parser("watch", help="watch a session")):
        if cmd is not at:
            cmd.add_argument("session", type=int)
        cmd.add_argument("--updates", type=int, default=0, help="stop after N updates (0: until final)")
        cmd.add_argument("--interval-ms", type=int, default=1000)
        cmd.add_argument("--top", type=int, default=10)
    args = p.parse_args()

    pb, rpc = load_stubs()
    stub = rpc.ProfilerStub(channel(args))
    try:
        if args.command == "list":
            reply = stub.ListSessions(pb.ListSessionsRequest(all=args.all))
            print_sessions(pb, reply.sessions)
        elif args.command == "attach":
            reply = stub.Attach(
                pb.AttachRequest(
                    pid=args.pid,
                    frequency_hz=args.frequency,
                    duration_ms=int(args.seconds * 1000),
                )
            )
            print(f"session {reply.session.id} attached to pid {args.pid}")
            watch(pb, stub, reply.session.id, args.updates, args.interval_ms, args.top)
        else:
            watch(pb, stub, args.session, args.updates, args.interval_ms, args.top)
    except grpc.RpcError as e:
        sys.exit(f"profd: {e.code().name}: {e.details()}")


if __name__ == "__main__":
    main()
