#!/usr/bin/env python3
"""Multi-threaded key-value client for scripts/test_real.sh (cases memcached
and redis): THREADS client threads, each with its own connection, set KEYS
keys each (distinct per thread, values of varying length derived from the
key), then read every key back (a plain get, a pipelined batch of gets, and
one multi-key get) and verify each value. Plain sockets, no client library.

    usage: kv_client.py memcached|redis PORT THREADS KEYS

Prints "kv_client: PROTO ok sets=N gets=N" and exits 0, or prints the first
mismatch or error and exits 1.
"""
import socket
import sys
import threading

proto, port, nthreads, nkeys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
errors = []
counts = {"sets": 0, "gets": 0}
lock = threading.Lock()


def value_of(key):
    """A value of 1..2000 bytes that depends on the key only."""
    h = 0
    for c in key.encode():
        h = (h * 131 + c) & 0xFFFFFFFF
    size = 1 + h % 2000
    unit = (key + ":").encode()
    return (unit * (size // len(unit) + 1))[:size]


class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError("server closed the connection")
            self.buf += chunk
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def close(self):
        self.s.close()


# ---- memcached text protocol --------------------------------------------------------
def mc_set(c, k, v):
    c.send(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v))


def mc_set_reply(c):
    r = c.line()
    if r != b"STORED":
        raise ValueError("set: %r" % r)


def mc_get(c, keys):
    c.send(b"get %s\r\n" % b" ".join(k.encode() for k in keys))


def mc_get_reply(c):
    got = {}
    while True:
        ln = c.line()
        if ln == b"END":
            return got
        parts = ln.split()
        if parts[0] != b"VALUE":
            raise ValueError("get: %r" % ln)
        got[parts[1].decode()] = c.exact(int(parts[3]))


# ---- redis RESP ---------------------------------------------------------------------
def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def rd_reply(c):
    ln = c.line()
    t, rest = ln[:1], ln[1:]
    if t == b"+":
        return rest
    if t == b"-":
        raise ValueError("redis error: %r" % rest)
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        return None if n < 0 else c.exact(n)
    if t == b"*":
        return [rd_reply(c) for _ in range(int(rest))]
    raise ValueError("bad reply %r" % ln)


def worker(t):
    try:
        c = Conn()
        keys = ["k%d_%d" % (t, i) for i in range(nkeys)]
        sets = gets = 0
        # Sets, pipelined in batches of 50.
        for b in range(0, nkeys, 50):
            batch = keys[b:b + 50]
            if proto == "memcached":
                for k in batch:
                    mc_set(c, k, value_of(k))
                for k in batch:
                    mc_set_reply(c)
            else:
                c.send(b"".join(resp("SET", k, value_of(k)) for k in batch))
                for k in batch:
                    r = rd_reply(c)
                    if r != b"OK":
                        raise ValueError("SET %s: %r" % (k, r))
            sets += len(batch)
        # Every key with a plain get, one round trip each (the first 200),
        # then pipelined gets, then multi-key gets of 20.
        for k in keys[:200]:
            if proto == "memcached":
                mc_get(c, [k])
                v = mc_get_reply(c).get(k)
            else:
                c.send(resp("GET", k))
                v = rd_reply(c)
            if v != value_of(k):
                raise ValueError("get %s: wrong value (%r...)" % (k, (v or b"")[:40]))
            gets += 1
        for b in range(0, nkeys, 50):
            batch = keys[b:b + 50]
            if proto == "memcached":
                for k in batch:
                    mc_get(c, [k])
                vals = [mc_get_reply(c).get(k) for k in batch]
            else:
                c.send(b"".join(resp("GET", k) for k in batch))
                vals = [rd_reply(c) for k in batch]
            for k, v in zip(batch, vals):
                if v != value_of(k):
                    raise ValueError("pipelined get %s: wrong value (%r...)" % (k, (v or b"")[:40]))
            gets += len(batch)
        for b in range(0, nkeys, 20):
            batch = keys[b:b + 20]
            if proto == "memcached":
                mc_get(c, batch)
                got = mc_get_reply(c)
                vals = [got.get(k) for k in batch]
            else:
                c.send(resp("MGET", *batch))
                vals = rd_reply(c)
            for k, v in zip(batch, vals):
                if v != value_of(k):
                    raise ValueError("multi-get %s: wrong value (%r...)" % (k, (v or b"")[:40]))
            gets += len(batch)
        c.close()
        with lock:
            counts["sets"] += sets
            counts["gets"] += gets
    except Exception as e:  # noqa: BLE001 - any failure is reported
        with lock:
            errors.append("thread %d: %s: %s" % (t, type(e).__name__, e))


ts = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
if errors:
    for e in errors[:5]:
        print("kv_client: " + e)
    sys.exit(1)
want_gets = nthreads * (min(200, nkeys) + 2 * nkeys)
if counts["sets"] != nthreads * nkeys or counts["gets"] != want_gets:
    print("kv_client: wrong counts %r" % counts)
    sys.exit(1)
print("kv_client: %s ok sets=%d gets=%d" % (proto, counts["sets"], counts["gets"]))
