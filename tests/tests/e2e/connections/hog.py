"""A misbehaving client of profd: holds connections and reopens each one as
soon as the daemon closes it (or refuses it).

    hog.py MODE TARGET SOURCE CALLPING PING RAW CAFILE

MODE unix (TARGET a socket path) or tls (TARGET HOST:PORT, connections made
from the address SOURCE). First CALLPING connections (unix only) each make
one call (grpc.health.v1.Health/Check) and then send an HTTP/2 PING every
100 ms until closed, not reopened; then PING connections do the TLS
handshake (tls), send the HTTP/2 preface and SETTINGS, then a PING every
100 ms; then RAW connections send nothing at all. Those that speak HTTP/2
acknowledge the daemon's SETTINGS and PINGs, as a live client does. Prints:

    callping answered          each CALLPING connection's call answered
    callping closed SECONDS    closed by the daemon SECONDS after its answer
    stats opened=N closed=N failed=N pings=N    every half second

(opened: connections made; closed: closed by the daemon once open, at once
or later; failed: could not connect or finish the TLS handshake). Runs
until killed.
"""
import os
import socket
import ssl
import struct
import sys
import threading
import time

mode, target, source = sys.argv[1], sys.argv[2], sys.argv[3]
callping_n, ping_n, raw_n = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
cafile = sys.argv[7]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    # HPACK: a literal header field without indexing, new name, no Huffman.
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


SETTINGS = frame(4, 0, 0)
SETTINGS_ACK = frame(4, 1, 0)
CALL = frame(1, 0x4, 1, b"".join([  # HEADERS, END_HEADERS, stream 1
    literal(b":method", b"POST"),
    literal(b":scheme", b"http"),
    literal(b":path", b"/grpc.health.v1.Health/Check"),
    literal(b":authority", b"localhost"),
    literal(b"content-type", b"application/grpc"),
    literal(b"te", b"trailers"),
])) + frame(0, 0x1, 1, b"\x00\x00\x00\x00\x00")  # DATA, END_STREAM: an empty message

lock = threading.Lock()
counts = {"opened": 0, "closed": 0, "failed": 0, "pings": 0}
tls = None
if mode == "tls":
    tls = ssl.create_default_context(cafile=cafile)
    tls.set_alpn_protocols(["h2"])


def bump(key):
    with lock:
        counts[key] += 1


def say(line):
    with lock:
        print(line, flush=True)


def connect(handshake):
    if mode == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.connect(target)
        return s
    host, port = target.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), source_address=(source, 0))
    if handshake:
        s = tls.wrap_socket(s, server_hostname="localhost")
    return s


class Frames:
    """The HTTP/2 frames of what the daemon sends."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                return
            kind, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            yield kind, flags, stream, payload


def answer(s, kind, flags, payload):
    """Acknowledges the daemon's SETTINGS and PINGs, as a live client does."""
    if kind == 4 and not flags & 0x1:
        s.sendall(SETTINGS_ACK)
    elif kind == 6 and not flags & 0x1:
        s.sendall(frame(6, 0x1, 0, payload))


def ping_until_closed(s, frames):
    """Sends a PING every 100 ms, answering the daemon's, until the daemon
    closes the connection."""
    s.settimeout(0.1)
    last = 0.0
    try:
        while True:
            try:
                data = s.recv(65536)
                if not data:
                    return
                for kind, flags, _, payload in frames.feed(data):
                    answer(s, kind, flags, payload)
            except (socket.timeout, ssl.SSLWantReadError):
                pass
            if time.monotonic() - last >= 0.1:
                s.sendall(frame(6, 0, 0, os.urandom(8)))
                last = time.monotonic()
                bump("pings")
    except (OSError, ssl.SSLError):
        return


callers_done = threading.Semaphore(0)


def callping():
    frames = Frames()
    try:
        s = connect(True)
        s.sendall(PREFACE + SETTINGS + CALL)
        answered = False
        while not answered:
            data = s.recv(65536)
            if not data:
                raise OSError("closed before the answer")
            for kind, flags, stream, payload in frames.feed(data):
                answer(s, kind, flags, payload)
                if stream == 1 and kind in (0, 1) and flags & 0x1:
                    answered = True
    except (OSError, ssl.SSLError) as e:
        say("callping failed %s" % e)
        callers_done.release()
        return
    say("callping answered")
    callers_done.release()
    start = time.monotonic()
    ping_until_closed(s, frames)
    say("callping closed %.2f" % (time.monotonic() - start))


def pinger():
    while True:
        try:
            s = connect(True)
            s.sendall(PREFACE + SETTINGS)
        except (OSError, ssl.SSLError):
            bump("failed")
            continue
        bump("opened")
        ping_until_closed(s, Frames())
        s.close()
        bump("closed")


def raw():
    while True:
        try:
            s = connect(False)
        except OSError:
            bump("failed")
            time.sleep(0.01)
            continue
        bump("opened")
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
        bump("closed")


def start(n, fn):
    for _ in range(n):
        threading.Thread(target=fn, daemon=True).start()


def stats():
    while True:
        with lock:
            line = "stats " + " ".join("%s=%d" % kv for kv in sorted(counts.items()))
        say(line)
        time.sleep(0.5)


for _ in range(callping_n):
    threading.Thread(target=callping, daemon=True).start()
# The others start once every call is answered (or failed), so that the
# calls are sure to get in.
deadline = time.monotonic() + 30
for _ in range(callping_n):
    if not callers_done.acquire(timeout=max(0.0, deadline - time.monotonic())):
        break
threading.Thread(target=stats, daemon=True).start()
start(ping_n, pinger)
start(raw_n, raw)
while True:
    time.sleep(3600)
