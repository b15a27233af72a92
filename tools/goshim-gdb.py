# goshim-gdb.py: gdb commands that see goshim's threads (Gs), not only its OS threads (Ms).
#
#   (gdb) source /usr/local/share/goshim/goshim-gdb.py    (or a line in ~/.gdbinit)
#   (gdb) info goshim          every P, M and G: number, name, state, what it waits for, its M
#   (gdb) goshim bt N          the backtrace of thread (G) N, parked, runnable or running
#   (gdb) goshim bt all        every thread's backtrace
#   (gdb) goshim gcore [FILE]  gcore, plus the live part of every thread's stack (see below)
#
# Under goshim a program's thread is a G: a stack and a glibc TCB that an OS
# thread (M) runs for a while, then switches away from. gdb knows only the
# OS threads, so `info threads` shows a few Ms and `thread apply all bt` the
# scheduler's loops; the program's parked threads are invisible. This file
# reads the runtime's own structures (sched/runtime.h) through the debug
# info of libgoshim.so, nothing else: no symbol of the program, no code run
# in the inferior (so it works the same on a live process, attached or
# started under gdb, and on a core file from gcore or a crash).
#
#   sched.allg (alllink)  every G: goid, atomicstatus, waitkind/waitobj (what the wrapper it
#                         waits in waits for), thr (the shim's struct sthread: the name),
#                         sched.sp (its saved context while it is switched out), m
#   sched.allm (alllink)  every M: id, tid (its OS thread), p, curg
#   sched.allp[]          every P: id, status, m, run queue
#
# The wait descriptions are the deadlock report's (sched/dump.c): its reasons[] table
# is read from the library, and the mutex owner, the joined thread and the fd are
# found the same way.
#
# Backtrace of a switched-out G: its context is a frame ctx_mcall pushed on the G's
# stack (sched/context_x86_64_sysv_elf.S):
#   sp+0 MXCSR|x87 CW, sp+8 r15, +16 r14, +24 r13, +32 r12, +40 rbx, +48 rbp, +56 return
# and the G resumes at that return address with rsp = sp+64. gdb must unwind from
# those registers instead of the OS thread's. Two ways were weighed:
#   - a temporary register switch (set $rsp/$rip/... on some thread, `bt`, restore),
#     as Go's runtime-gdb.py does: it writes the registers of a live thread (dangerous
#     if the restore is interrupted) and does not work on a core file, where gdb
#     cannot write registers;
#   - a gdb unwinder (chosen): while `goshim bt` runs, a Python unwinder claims the
#     innermost frame of the selected OS thread and says its caller's registers are
#     the G's saved ones. gdb's own DWARF unwinder then walks the G's stack from
#     there, exactly as for any thread (inlined frames, signal frames, libc's CFI),
#     and nothing in the inferior is written. The claimed frame is a stand-in and is
#     not printed; its frame id is placed just below the G's saved context, so gdb's
#     "frame inner to this frame" check holds whatever the two stacks' addresses.
# A running G (or one in a system call) has its registers on its M's OS thread:
# its backtrace is that gdb thread's.
#
# Core files. gdb's gcore copies each mapping in 1 MiB reads and gives up on the
# rest of a mapping at the first read that fails. goshim's stacks carry their guard
# page as a marker inside the mapping (MADV_GUARD_INSTALL, sched/stack_span.c), and
# adjacent stacks merge into one mapping, so a plain gcore keeps the runtime's
# structures (info goshim works, without thread names: a thread's record and TCB sit
# at the top of its stack block, sched/threadblock.c) but writes zeros for the G stacks:
# `goshim bt` then says so. `goshim gcore FILE` runs gcore, then writes into FILE the
# part of each G stack that is in use (from its saved or current stack pointer to
# the top, TCB and record included), read
# from the process with ordinary reads. A core the kernel dumps (a crash, with
# `ulimit -c`) skips only the guard pages themselves and needs no such help.

import gdb
from gdb.unwinder import Unwinder, register_unwinder

G_STATES = {0: "idle", 1: "runnable", 2: "running", 3: "in a system call", 4: "waiting", 5: "dead"}
P_STATES = {0: "idle", 1: "running", 2: "in a system call", 3: "dead"}
G_RUNNABLE, G_RUNNING, G_SYSCALL, G_WAITING, G_DEAD = 1, 2, 3, 4, 5
G_STARTED, G_MAIN = 1, 4
STHREAD_MAGIC = 0x67746872
FS_METHODS = {0: "wrfsbase", 1: "arch_prctl", 2: "none (GOSHIM_TLS=errno)"}
MAX_LIST = 1000000  # a corrupt list must not loop forever


class GoshimError(gdb.GdbError):
    pass


# ---- reading the runtime ------------------------------------------------------------------


def libgoshim():
    """The objfile of libgoshim.so, or an error saying what is missing."""
    for o in gdb.objfiles():
        if o.filename and o.filename.rsplit("/", 1)[-1].startswith("libgoshim.so"):
            return o
    raise GoshimError("goshim: libgoshim.so is not loaded in this process "
                      "(is it running under goshim? `info sharedlibrary` lists what is)")


def lib_symbol(name, static_in=None):
    """A variable of libgoshim.so: global, or file-static in the source file static_in."""
    obj = libgoshim()
    if static_in is None:
        sym = obj.lookup_global_symbol(name) or obj.lookup_static_symbol(name)
        if sym is not None:
            return sym.value()
    else:
        try:
            return gdb.parse_and_eval("'%s'::%s" % (static_in, name))
        except gdb.error:
            pass
    raise GoshimError("goshim: no debug information for '%s' in %s: goshim-gdb.py needs "
                      "libgoshim.so built with -g (the default CFLAGS)" % (name, obj.filename))


def walk(head, link):
    """The nodes of a NULL-terminated list from pointer head, following field link."""
    n = 0
    while int(head) != 0 and n < MAX_LIST:
        yield head
        head = head.dereference()[link]
        n += 1


STATE_WORDS = {"Gidle": "idle", "Grunnable": "runnable", "Grunning": "running",
               "Gsyscall": "in a system call", "Gwaiting": "waiting", "Gdead": "dead"}


def enum_values():
    """The runtime's state numbers and flags, from its debug information (sched/runtime.h);
    the constants above stand in for any that cannot be read."""
    global G_RUNNABLE, G_RUNNING, G_SYSCALL, G_WAITING, G_DEAD, G_STARTED, G_MAIN
    names = ["Grunnable", "Grunning", "Gsyscall", "Gwaiting", "Gdead", "G_STARTED", "G_MAIN"]
    try:
        vals = [int(gdb.parse_and_eval(name)) for name in names]
    except gdb.error:
        return
    G_RUNNABLE, G_RUNNING, G_SYSCALL, G_WAITING, G_DEAD, G_STARTED, G_MAIN = vals
    for name, word in STATE_WORDS.items():
        try:
            G_STATES[int(gdb.parse_and_eval(name))] = word
        except gdb.error:
            pass


class Runtime:
    """A snapshot of the scheduler's state, read once per command."""

    def __init__(self):
        self.sched = lib_symbol("sched")
        enum_values()
        self.gs = list(walk(self.sched["allg"], "alllink"))
        self.ms = sorted(walk(self.sched["allm"], "alllink"), key=lambda mp: int(mp["id"]))
        n = int(self.sched["gomaxprocs"])
        self.ps = [self.sched["allp"][i] for i in range(n) if int(self.sched["allp"][i]) != 0]
        self.tls_full = int(lib_symbol("tls_mode")) == int(gdb.parse_and_eval("TLS_MODE_FULL"))
        try:
            self.reasons = lib_symbol("reasons", "dump.c")
        except GoshimError:
            self.reasons = None
        try:
            self.tid_off = int(lib_symbol("tls_info", "tls.c")["tid_off"])
        except (GoshimError, gdb.error):
            self.tid_off = None
        self.u32 = gdb.lookup_type("unsigned int").pointer()
        self.i32 = gdb.lookup_type("int").pointer()
        self.u64 = gdb.lookup_type("unsigned long").pointer()
        self.char = gdb.lookup_type("char").pointer()
        try:
            self.sthread = gdb.lookup_type("struct sthread").pointer()
        except gdb.error:
            self.sthread = None

    def live_gs(self):
        """Every G that has run and not exited, by number."""
        live = [gp for gp in self.gs
                if int(gp["atomicstatus"]) != G_DEAD and int(gp["flags"]) & G_STARTED]
        return sorted(live, key=lambda gp: int(gp["goid"]))

    def find_g(self, goid):
        for gp in self.live_gs():
            if int(gp["goid"]) == goid:
                return gp
        return None

    def record(self, gp):
        """The shim's thread record of gp (struct sthread *), or None."""
        if self.sthread is None or int(gp["thr"]) == 0:
            return None
        st = gp["thr"].cast(self.sthread)
        try:
            return st if int(st["magic"]) == STHREAD_MAGIC else None
        except gdb.MemoryError:
            return None

    def name(self, gp):
        """' "name"', ' (main)' or '', as the dump prints them."""
        st = self.record(gp)
        if st is not None:
            name = st["name"].string(length=16).split("\0", 1)[0]
            if name:
                return ' "%s"' % name
            if bool(st["is_main"]):
                return " (main)"
        elif int(gp["flags"]) & G_MAIN:
            return " (main)"
        return ""

    def fake_tid(self, gp):
        """The thread id goshim gave gp (glibc's mutexes record it as the owner)."""
        if self.tls_full:
            if self.tid_off is None or int(gp["tcb"]) == 0:
                return None
            return int((gp["tcb"].cast(self.char) + self.tid_off).cast(self.u32).dereference())
        return 0x40000000 | (int(gp["goid"]) & 0x1FFFFFFF)

    def owner_g(self, tid):
        for gp in self.live_gs():
            try:
                if self.fake_tid(gp) == tid:
                    return gp
            except gdb.MemoryError:
                pass
        return None

    def wait_text(self, gp):
        """What gp waits for, in the deadlock report's words: 'mutex 0x..., held by thread 1'."""
        kind, obj = int(gp["waitkind"]), int(gp["waitobj"])
        reason = "waiting"
        if self.reasons is not None and 0 <= kind < self.reasons.type.range()[1] + 1:
            reason = self.reasons[kind].string()
        detail = ""
        if reason == "join":
            detail = self.join_detail(obj)
        elif reason == "I/O" and obj:
            detail = "on fd %d" % obj
        if not detail and obj:
            detail = "0x%x" % obj
        if reason == "mutex" and obj:
            detail += self.mutex_detail(obj)
        return reason + (" " + detail if detail else "")

    def join_detail(self, obj):
        if obj == 0 or self.sthread is None:
            return ""
        try:
            st = gdb.Value(obj).cast(self.sthread)
            if int(st["magic"]) == STHREAD_MAGIC and int(st["gp"]) != 0:
                return "of thread %d" % int(st["gp"]["goid"])
        except gdb.MemoryError:
            pass
        return ""

    def mutex_detail(self, obj):
        try:  # glibc's x86-64 pthread_mutex_t: __lock, __count, __owner
            tid = int((gdb.Value(obj).cast(self.char) + 8).cast(self.i32).dereference())
        except gdb.MemoryError:
            return ""
        if tid == 0:
            return ""
        o = self.owner_g(tid)
        if o is None:
            return ", held by id %d" % tid
        return ", held by thread %d%s" % (int(o["goid"]), self.name(o))

    def m_of(self, gp):
        """The M running gp, if it runs (or is in a system call)."""
        for mp in self.ms:
            if int(mp["curg"]) == int(gp):
                return mp
        return None

    def describe(self, gp):
        """'thread N "name" [what]': the line the deadlock report prints for gp."""
        st = int(gp["atomicstatus"])
        head = "thread %d%s" % (int(gp["goid"]), self.name(gp))
        if st == G_WAITING:
            return "%s [%s]" % (head, self.wait_text(gp))
        where = ""
        mp = self.m_of(gp) if st in (G_RUNNING, G_SYSCALL) else None
        if mp is not None:
            where = " on M%d (%s)" % (int(mp["id"]), os_thread(int(mp["tid"])))
        return "%s [%s]%s" % (head, G_STATES.get(st, "?"), where)


def gdb_thread(tid):
    """The gdb thread whose LWP is tid, or None."""
    for t in gdb.selected_inferior().threads():
        if t.ptid[1] == tid or (t.ptid[1] == 0 and t.ptid[0] == tid):
            return t
    return None


def os_thread(tid):
    t = gdb_thread(tid)
    return "OS thread %d, gdb thread %d" % (tid, t.num) if t else "OS thread %d" % tid


# ---- info goshim --------------------------------------------------------------------------


def print_ps_ms(rt):
    try:
        fs = FS_METHODS.get(int(lib_symbol("tls_fs_method")), "?")
    except GoshimError:
        fs = "?"
    print("goshim: %d Ps, %d Ms, %d threads (Gs); TLS %s, FS base by %s" %
          (len(rt.ps), len(rt.ms), len(rt.live_gs()),
           "per thread" if rt.tls_full else "errno only", fs))
    for pp in rt.ps:
        p = pp.dereference()
        queued = (int(p["runqtail"]) - int(p["runqhead"])) & 0xFFFFFFFF
        queued += 1 if int(p["runnext"]) else 0
        owner = " on M%d" % int(p["m"]["id"]) if int(p["m"]) else ""
        print("P%d: %s%s, %d queued" % (int(p["id"]), P_STATES.get(int(p["status"]), "?"), owner,
                                        queued))
    print("global run queue: %d" % int(rt.sched["runqsize"]))
    for mp in rt.ms:
        m = mp.dereference()
        pdesc = "P%d" % int(m["p"]["id"]) if int(m["p"]) else "no P"
        gdesc = "running thread %d" % int(m["curg"]["goid"]) if int(m["curg"]) else "in the scheduler"
        if int(m["p"]) == 0 and int(m["curg"]) == 0:
            gdesc = "idle"
        print("M%d: %s, %s, %s" % (int(m["id"]), os_thread(int(m["tid"])), pdesc, gdesc))


class InfoGoshim(gdb.Command):
    """List goshim's Ps, Ms and threads (Gs).

Usage: info goshim
For each thread (G): its number, name and what it waits for, in the words of
goshim's deadlock report, or its state and the M (OS thread) that runs it."""

    def __init__(self):
        super().__init__("info goshim", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        if not gdb.selected_inferior().threads():
            raise GoshimError("info goshim: no process or core file")
        rt = Runtime()
        print_ps_ms(rt)
        for gp in rt.live_gs():
            print(rt.describe(gp))


# ---- backtraces ---------------------------------------------------------------------------


class FrameId:
    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


class SavedContext(Unwinder):
    """While regs is set, the innermost real frame's caller has those registers (a G's).

    The innermost real frame is at level `level`: above it are only the inline frames
    of the function the OS thread stopped in (at a breakpoint in an inlined function,
    say), which gdb unwinds without asking Python unwinders."""

    def __init__(self):
        super().__init__("goshim saved context")
        self.regs = None
        self.level = 0

    def __call__(self, pending):
        if self.regs is None or pending.level() != self.level:
            return None
        # Its id: just below the G's saved frame, so the G's frames are outer to it.
        below = gdb.Value(int(self.regs["rsp"]) - 72).cast(self.regs["rsp"].type)
        info = pending.create_unwind_info(FrameId(below, pending.read_register("rip")))
        for name, value in self.regs.items():
            info.add_saved_register(name, value)
        return info


UNWINDER = SavedContext()
register_unwinder(None, UNWINDER, replace=True)


def saved_registers(gp):
    """The registers a switched-out G resumes with (see the frame layout above)."""
    sp = int(gp["sched"]["sp"])
    u64 = gdb.lookup_type("unsigned long")
    words = [int(v) for v in
             [(gdb.Value(sp).cast(u64.pointer()) + k).dereference() for k in range(8)]]
    ptr = gdb.lookup_type("void").pointer()
    code = gdb.lookup_type("void").pointer()
    regs = {"r15": words[1], "r14": words[2], "r13": words[3], "r12": words[4], "rbx": words[5],
            "rbp": words[6]}
    out = {k: gdb.Value(v).cast(u64) for k, v in regs.items()}
    out["rip"] = gdb.Value(words[7]).cast(code)
    out["rsp"] = gdb.Value(sp + 64).cast(ptr)
    return out


def frame_line(n, f):
    pc = f.pc()
    name = f.name() or "??"
    sal = f.find_sal()
    where = ""
    if sal is not None and sal.symtab is not None and sal.line:
        where = " at %s:%d" % (sal.symtab.filename, sal.line)
    else:
        lib = gdb.solib_name(pc) or gdb.current_progspace().filename
        if lib:
            where = " from %s" % lib
    return "#%-2d 0x%016x in %s ()%s" % (n, pc, name, where)


def print_frames(first, limit=200):
    n, f = 0, first
    while f is not None and n < limit:
        print(frame_line(n, f))
        n += 1
        try:
            f = f.older()
        except gdb.error as e:
            print("(%s)" % e)
            break


def backtrace(rt, gp):
    st = int(gp["atomicstatus"])
    if st in (G_RUNNING, G_SYSCALL):
        mp = rt.m_of(gp)
        t = gdb_thread(int(mp["tid"])) if mp is not None else None
        if t is None:
            print("(running, but no gdb thread carries it)")
            return
        old = gdb.selected_thread()
        t.switch()
        try:
            print_frames(gdb.newest_frame())
        finally:
            old.switch()
        return
    if int(gp["sched"]["sp"]) == 0:
        print("(no saved context)")
        return
    regs = saved_registers(gp)
    if int(regs["rip"]) == 0:
        print("(its saved context reads as zeros: this core file lacks the thread stacks; "
              "gdb's gcore stops at goshim's guard pages, `goshim gcore FILE` keeps them)")
        return
    f, level = gdb.newest_frame(), 0
    while f is not None and f.type() == gdb.INLINE_FRAME:
        f, level = f.older(), level + 1
    # gdb does not unwind past main(): the stand-in frame may be main's.
    past_main = gdb.parameter("backtrace past-main")
    gdb.execute("set backtrace past-main on", to_string=True)
    UNWINDER.regs, UNWINDER.level = regs, level
    gdb.invalidate_cached_frames()
    try:
        f = gdb.newest_frame()
        for _ in range(level + 1):  # the stand-in frame and its inline frames
            f = f.older() if f is not None else None
        print_frames(f)
    finally:
        UNWINDER.regs = None
        gdb.execute("set backtrace past-main %s" % ("on" if past_main else "off"), to_string=True)
        gdb.invalidate_cached_frames()


class Goshim(gdb.Command):
    """goshim's commands: goshim bt N | goshim bt all (and info goshim)."""

    def __init__(self):
        super().__init__("goshim", gdb.COMMAND_STACK, prefix=True)


class GoshimBt(gdb.Command):
    """Backtrace of a goshim thread (G), from its saved context.

Usage: goshim bt N      thread N as `info goshim` numbers it
       goshim bt all    every thread
A parked or runnable thread is unwound from the registers it was switched out
with; a running one (or one in a system call) is its OS thread's backtrace."""

    def __init__(self):
        super().__init__("goshim bt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        if not gdb.selected_inferior().threads():
            raise GoshimError("goshim bt: no process or core file")
        rt = Runtime()
        arg = arg.strip()
        if arg == "all":
            for gp in rt.live_gs():
                print("\n" + rt.describe(gp) + ":")
                backtrace(rt, gp)
            return
        if not arg.isdigit():
            raise GoshimError("usage: goshim bt N | goshim bt all (N: a thread number from "
                              "`info goshim`)")
        gp = rt.find_g(int(arg))
        if gp is None:
            raise GoshimError("goshim bt: no thread %s (`info goshim` lists them)" % arg)
        print(rt.describe(gp) + ":")
        backtrace(rt, gp)


# ---- goshim gcore -------------------------------------------------------------------------


def live_stack_ranges(rt):
    """[(lo, hi)]: the part of each G's stack in use, for the core."""
    out = []
    for gp in rt.live_gs():
        lo, hi = int(gp["stack"]["lo"]), int(gp["stack"]["hi"])
        if lo == 0 or hi <= lo:
            continue  # the main thread: glibc's stack, a plain mapping
        sp = int(gp["sched"]["sp"])
        mp = rt.m_of(gp) if int(gp["atomicstatus"]) in (G_RUNNING, G_SYSCALL) else None
        t = gdb_thread(int(mp["tid"])) if mp is not None else None
        if t is not None:
            old = gdb.selected_thread()
            t.switch()
            try:
                sp = int(gdb.parse_and_eval("$rsp")) - 128  # and its red zone
            finally:
                old.switch()
        if lo <= sp < hi:
            out.append((sp & ~4095, hi))
    return out


def patch_core(path, ranges):
    """Write inferior memory ranges into the PT_LOAD segments of core file path."""
    import struct
    written = 0
    with open(path, "r+b") as f:
        eh = f.read(64)
        if eh[:4] != b"\x7fELF" or eh[4] != 2:
            raise GoshimError("goshim gcore: %s is not a 64-bit ELF core" % path)
        phoff, = struct.unpack_from("<Q", eh, 32)
        phentsize, phnum = struct.unpack_from("<HH", eh, 54)
        f.seek(phoff)
        phs = [struct.unpack("<IIQQQQQQ", f.read(phentsize)[:56]) for _ in range(phnum)]
        inf = gdb.selected_inferior()
        for lo, hi in ranges:
            for (ptype, _flags, off, vaddr, _pa, filesz, _memsz, _align) in phs:
                a, b = max(lo, vaddr), min(hi, vaddr + filesz)
                if ptype != 1 or a >= b:
                    continue
                try:
                    data = inf.read_memory(a, b - a)
                except gdb.MemoryError:
                    continue
                f.seek(off + a - vaddr)
                f.write(bytes(data))
                written += b - a
    return written


class GoshimGcore(gdb.Command):
    """gcore, plus the stacks of goshim's threads.

Usage: goshim gcore [FILE]   (default: core.PID)
gdb's own gcore loses goshim's thread stacks (their guard pages stop its copy
of a mapping); this writes the part of each stack in use into FILE as well."""

    def __init__(self):
        super().__init__("goshim gcore", gdb.COMMAND_FILES)

    def invoke(self, arg, from_tty):
        inf = gdb.selected_inferior()
        if inf.pid == 0 or not inf.threads():
            raise GoshimError("goshim gcore: no live process")
        rt = Runtime()
        ranges = live_stack_ranges(rt)
        path = arg.strip() or "core.%d" % inf.pid
        gdb.execute("gcore " + path, to_string=True)
        n = patch_core(path, ranges)
        print("goshim: saved %s, with %d thread stacks (%d KiB)" % (path, len(ranges), n // 1024))


InfoGoshim()
Goshim()
GoshimBt()
GoshimGcore()
