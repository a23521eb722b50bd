"""A Python service for benches/hostmix.sh: THREADS threads, each busy for
BUSY_MS (parsing and writing JSON, hashing, sorting) then asleep for
SLEEP_MS, over and over. Every second it writes the requests done so far to
PROGRESS (written aside and renamed, so a reader never sees half a number).

Usage: python3 mix_service.py PROGRESS [THREADS] [BUSY_MS] [SLEEP_MS]
"""
import hashlib
import json
import os
import sys
import threading
import time

progress = sys.argv[1]
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 4
busy_s = (float(sys.argv[3]) if len(sys.argv) > 3 else 20) / 1000
sleep_s = (float(sys.argv[4]) if len(sys.argv) > 4 else 80) / 1000
done = [0] * threads


def request(n):
    """One request: a document built, encoded, decoded, hashed and sorted."""
    doc = {"id": n, "items": [{"k": i, "v": str(i * n % 977)} for i in range(64)]}
    text = json.dumps(doc)
    back = json.loads(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    back["items"].sort(key=lambda x: x["v"])
    return len(digest) + len(back["items"])


def worker(t):
    n = 0
    while True:
        end = time.monotonic() + busy_s
        while time.monotonic() < end:
            request(n)
            n += 1
            done[t] += 1
        time.sleep(sleep_s)


for t in range(threads):
    threading.Thread(target=worker, args=(t,), daemon=True).start()
while True:
    time.sleep(1)
    with open(progress + ".tmp", "w") as f:
        f.write("%d\n" % sum(done))
    os.replace(progress + ".tmp", progress)
