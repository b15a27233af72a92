#!/usr/bin/env python3
"""A process pool whose workers are started with spawn or forkserver, one
task, then the interpreter exits (goshim issue 27, item 5: it hung at exit).

At exit the pool's manager thread must see its worker's result: it polls
the result pipe the worker (a child that got the write end across exec)
wrote into, then reads it. Prints the task's line; exit 0. The script leads
a process group of its own: if it takes more than 60 s, a watchdog prints
every thread's traceback and kills the group (workers, forkserver and
resource tracker too, which would otherwise outlive a hung run).

    usage: py_pool_exit.py spawn|forkserver|fork
"""
import faulthandler
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor


def task():
    print("task ran", flush=True)


def watchdog():
    print("py_pool_exit.py: still running after 60 s", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(all_threads=True)
    os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    os.setpgid(0, 0)
    timer = threading.Timer(60, watchdog)
    timer.daemon = True
    timer.start()
    ctx = multiprocessing.get_context(sys.argv[1])
    ProcessPoolExecutor(5, mp_context=ctx).submit(task)
