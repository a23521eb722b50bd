"""A fixed amount of Python work, timed by itself, for benches/python.sh.

py_work.py CALLS prints "ready", waits for a line on stdin (the profiler
is attached by then), runs outer() CALLS times (each: hot_a three times,
hot_b once, the split of tests/workloads/py_split.py), then prints
"cpu SECONDS wall SECONDS" of the work alone.
"""
import os
import sys
import time

# hot_a and hot_b: the functions of the tests' workload.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "workloads"))
from py_split import hot_a, hot_b  # noqa: E402


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
