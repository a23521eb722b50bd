"""A fixed amount of Python work, timed by itself, for benches/python.sh.

py_work.py CALLS prints "ready", waits for a line on stdin (the profiler
is attached by then), runs outer() CALLS times (each: hot_a three times,
hot_b once, the split of tests/workloads/py_split.py), then prints
"cpu SECONDS wall SECONDS" of the work alone.
"""
import sys
import time


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


def outer():
    hot_a(3000)
    hot_a(3000)
    hot_a(3000)
    hot_b(3000)


def main():
    calls = int(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    cpu, wall = time.process_time(), time.monotonic()
    for _ in range(calls):
        outer()
    print(f"cpu {time.process_time() - cpu:.6f} wall {time.monotonic() - wall:.6f}", flush=True)


main()
