#!/usr/bin/env python3
"""CPython threading under goshim (scripts/test_real.sh, case py_threads).

Threads, locks, a condition, an event, a semaphore, a barrier,
queue.Queue producers and consumers, time.sleep and a thread pool; every
result is deterministic and printed, so the output under goshim must equal
the native output line for line.

    usage: py_threads.py [SCALE]    (SCALE multiplies the item counts, default 1)
"""
import concurrent.futures
import hashlib
import queue
import sys
import threading
import time

scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0


def n(x):
    return max(1, int(x * scale))


def work(i):
    """A little CPU per item (keeps the GIL busy, so switches happen)."""
    h = hashlib.sha256(str(i).encode()).digest()
    for _ in range(20):
        h = hashlib.sha256(h).digest()
    return int.from_bytes(h[:4], "little")


# 1. Locked counter: 8 threads, each adds to a shared dict under a Lock.
def counter():
    lock = threading.Lock()
    total = {"v": 0}
    per = n(20000)

    def run(k):
        for i in range(per):
            with lock:
                total["v"] += k * i % 7
    ts = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    want = sum(k * i % 7 for k in range(8) for i in range(per))
    return total["v"], want


# 2. Queue: 4 producers, 3 consumers, a sentinel per consumer; checksum of the items.
def producer_consumer():
    q = queue.Queue(maxsize=64)
    items = n(4000)
    out = queue.Queue()

    def produce(p):
        for i in range(items):
            q.put((p, i))

    def consume():
        s = 0
        c = 0
        while True:
            it = q.get()
            if it is None:
                q.task_done()
                break
            p, i = it
            s += work(p * items + i) if i % 16 == 0 else (p * 31 + i)
            c += 1
            q.task_done()
        out.put((s, c))
    prods = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    cons = [threading.Thread(target=consume) for _ in range(3)]
    for t in prods + cons:
        t.start()
    for t in prods:
        t.join()
    for _ in cons:
        q.put(None)
    q.join()
    for t in cons:
        t.join()
    s = c = 0
    while not out.empty():
        a, b = out.get()
        s += a
        c += b
    return s, c


# 3. Condition ping-pong between two threads, strictly alternating.
def pingpong():
    cv = threading.Condition()
    state = {"turn": 0, "log": 0}
    rounds = n(2000)

    def player(me):
        for r in range(rounds):
            with cv:
                while state["turn"] != me:
                    cv.wait()
                state["log"] = (state["log"] * 3 + me + r) % 1000000007
                state["turn"] = 1 - me
                cv.notify()
    ts = [threading.Thread(target=player, args=(m,)) for m in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return state["log"]


# 4. Sleeps, an Event and a Semaphore: 6 sleepers wait for the event, then
# at most 2 at a time hold the semaphore; the maximum seen must be 2.
def sleepers():
    ev = threading.Event()
    sem = threading.Semaphore(2)
    lock = threading.Lock()
    st = {"in": 0, "max": 0, "done": 0}

    def sleeper(k):
        ev.wait()
        time.sleep(0.001 * (k % 3))
        with sem:
            with lock:
                st["in"] += 1
                st["max"] = max(st["max"], st["in"])
            time.sleep(0.005)
            with lock:
                st["in"] -= 1
                st["done"] += 1
    ts = [threading.Thread(target=sleeper, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    time.sleep(0.02)
    ev.set()
    for t in ts:
        t.join()
    return st["max"], st["done"]


# 5. Barrier: 5 threads, several phases; each phase's sum is recorded by the
# barrier action.
def barrier():
    sums = []
    vals = [0] * 5
    b = threading.Barrier(5, action=lambda: sums.append(sum(vals)))
    phases = n(50)

    def run(k):
        for ph in range(phases):
            vals[k] = (k + 1) * (ph + 1)
            b.wait()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(sums), len(sums)


# 6. A thread pool mapping work() over a range; results in order.
def pool():
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        res = list(ex.map(work, range(n(2000))))
    return sum(res) % 1000000007, len(res)


# 7. Thread-local data and many short-lived threads.
def locals_():
    tl = threading.local()
    res = []
    lock = threading.Lock()

    def run(k):
        tl.v = k
        time.sleep(0)
        s = 0
        for i in range(100):
            s += tl.v * i
        with lock:
            res.append(s)
    for batch in range(n(20)):
        ts = [threading.Thread(target=run, args=(batch * 10 + k,)) for k in range(10)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    return sum(res), len(res)


def main():
    c, want = counter()
    print("counter", c, "ok" if c == want else "WRONG(want %d)" % want)
    print("queue", *producer_consumer())
    print("pingpong", pingpong())
    print("sleepers", *sleepers())
    print("barrier", *barrier())
    print("pool", *pool())
    print("locals", *locals_())
    print("threads alive at end", threading.active_count())


if __name__ == "__main__":
    main()
