"""A Python workload of known construction, profiled from outside.

py_split.py SECONDS MODE [--quiet] prints "ready" (unless --quiet), then
for SECONDS:
  split    outer() calls hot_a() three times for each call of hot_b(), each
           the same work: hot_a 75 %, hot_b 25 %, outer 100 % inclusive
  recurse  deep() recurses 5 levels down to hot_a(): deep 100 % inclusive,
           counted once per sample
  threads  two threads, left() and right(), each running its own loop
  zlib     squeeze() calls zlib.compress: libz's native code under it
  sleep    napper() sleeps in time.sleep() most of the time
  generator consume() iterates the generator produce(), which calls hot_a():
           produce and hot_a 100 % inclusive, under consume
"""
import sys
import threading
import time
import zlib


def hot_a(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def hot_b(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def outer(end):
    while time.monotonic() < end:
        hot_a(3000)
        hot_a(3000)
        hot_a(3000)
        hot_b(3000)


def deep(n):
    if n == 0:
        return hot_a(3000)
    return deep(n - 1)


def recurse(end):
    while time.monotonic() < end:
        deep(5)


def left(end):
    while time.monotonic() < end:
        hot_a(3000)


def right(end):
    while time.monotonic() < end:
        hot_b(3000)


def squeeze(end):
    data = bytes(range(256)) * 4096
    while time.monotonic() < end:
        zlib.compress(data, 6)


def produce(n):
    for _ in range(n):
        yield hot_a(3000)


def consume(end):
    while time.monotonic() < end:
        for _ in produce(4):
            pass


def napper(end):
    while time.monotonic() < end:
        time.sleep(0.05)
        hot_a(300)


def main():
    seconds = float(sys.argv[1])
    mode = sys.argv[2]
    end = time.monotonic() + seconds
    if "--quiet" not in sys.argv:
        print("ready", flush=True)
    if mode == "split":
        outer(end)
    elif mode == "recurse":
        recurse(end)
    elif mode == "threads":
        t = threading.Thread(target=right, args=(end,))
        t.start()
        left(end)
        t.join()
    elif mode == "zlib":
        squeeze(end)
    elif mode == "sleep":
        napper(end)
    elif mode == "generator":
        consume(end)


if __name__ == "__main__":
    main()
