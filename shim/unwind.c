/*
 * Unwinding a thread to its start: pthread_exit, and cancellation
 * (shim/cancel.c), end a thread by unwinding its stack as glibc does, so
 * that what the program registered on the way runs: C++ destructors, and
 * the handlers C's pthread_cleanup_push registered, innermost first.
 *
 * glibc's own pthread_exit cannot be used: it ends with a longjmp to a
 * buffer that only its start_thread sets up, and a G never runs there. So
 * sthread_unwind starts a forced unwind (_Unwind_ForcedUnwind) of the
 * calling thread's stack with a stop function of its own, exit_stop, which
 * the unwinder calls at each frame before running that frame's cleanups:
 *
 * C cleanup buffers. pthread_cleanup_push in C saves a jmp_buf in a buffer
 * on the stack and registers it with __pthread_register_cancel. goshim's
 * interposers keep a thread's buffers in its record (st->cleanup, innermost
 * first, chained through the buffer's own link word as glibc's are). When
 * the unwind is about to leave the frame that registered the innermost
 * buffer, exit_stop jumps into it: the macro's code runs the handler, then
 * calls __pthread_unwind_next, which takes the buffer off the list and
 * starts the unwind again from there.
 *
 * The end. A pthread's unwind ends in thread_main (thread.c), the entry of
 * every pthread G: past that frame, or at the end of the stack, exit_stop
 * jumps back to the buffer thread_main set (exit_jb), and thread_main
 * finishes the thread. The main thread has no such frame: at the end of
 * its stack it finishes where it is and its G ends. A stack without unwind
 * information cannot be unwound: the thread says so, skips its cleanup
 * handlers and destructors, and ends the same way.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <unwind.h>

#include "shim/shim.h"
#include "shim/thread.h"

static _Unwind_Reason_Code exit_stop(int version, _Unwind_Action actions,
                                     _Unwind_Exception_Class cls, struct _Unwind_Exception *exc,
                                     struct _Unwind_Context *ctx, void *param);

static uintptr_t jmpbuf_sp(const __pthread_unwind_buf_t *buf)
{
    /* glibc mangles the saved SP (x86-64 PTR_MANGLE: xor the pointer guard, rotate left 17). */
    uintptr_t v = (uintptr_t)buf->__cancel_jmp_buf[0].__cancel_jmp_buf[6];
    uintptr_t guard;
    __asm__("mov %%fs:0x30, %0" : "=r"(guard));
    v = (v >> 17) | (v << 47);
    return v ^ guard;
}

__attribute__((noreturn)) void sthread_unwind(struct sthread *st)
{
    memset(&st->exc, 0, sizeof st->exc);
    st->exc.exception_class = 0x474f5348494d0000ULL; /* "GOSHIM\0\0" */
    libc_unwind_forced(&st->exc, exit_stop, st);
    /* No unwind information at all: skip the cleanups rather than crash. */
    rt_print(2, "goshim: pthread_exit: cannot unwind the thread's stack; cleanup handlers "
                "and destructors are skipped\n");
    if (st->is_main) {
        sthread_finish(st);
        goexit();
    }
    _longjmp(st->exit_jb, 1);
}

static _Unwind_Reason_Code exit_stop(int version, _Unwind_Action actions,
                                     _Unwind_Exception_Class cls, struct _Unwind_Exception *exc,
                                     struct _Unwind_Context *ctx, void *param)
{
    (void)version;
    (void)cls;
    (void)exc;
    struct sthread *st = param;
    bool end = (actions & _UA_END_OF_STACK) != 0;
    uintptr_t cfa = end ? UINTPTR_MAX : (uintptr_t)libc_unwind_cfa(ctx);
    __pthread_unwind_buf_t *buf = st->cleanup;
    if (buf && cfa > jmpbuf_sp(buf)) {
        /* About to leave the frame that pushed it. The buffer is a jmp_buf without the
         * signal mask (glibc's __sigsetjmp(buf, 0)); longjmp reads the mask only when saved. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
        longjmp((struct __jmp_buf_tag *)(void *)buf->__cancel_jmp_buf, 1);
#pragma GCC diagnostic pop
    }
    if (st->is_main) {
        if (end) {
            sthread_finish(st);
            goexit();
        }
    } else if (end || cfa > st->exit_cfa) {
        _longjmp(st->exit_jb, 1);
    }
    return _URC_NO_REASON;
}

GOSHIM_EXPORT void pthread_exit(void *retval)
{
    struct sthread *st;
    if (!goshim_active() || !(st = sthread_self()))
        REAL(pthread_exit)(retval);
    st->retval = retval;
    sthread_unwind(st);
}

/* ---- C cleanup handlers: the buffers pthread_cleanup_push registers ------------ */

GOSHIM_EXPORT void __pthread_register_cancel(__pthread_unwind_buf_t *buf)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    if (!st || !sched_self()) {
        REAL(__pthread_register_cancel)(buf);
        return;
    }
    buf->__pad[0] = st->cleanup; /* priv.data.prev */
    st->cleanup = buf;
}

GOSHIM_EXPORT void __pthread_unregister_cancel(__pthread_unwind_buf_t *buf)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    if (!st || !sched_self()) {
        REAL(__pthread_unregister_cancel)(buf);
        return;
    }
    st->cleanup = buf->__pad[0];
}

GOSHIM_EXPORT void __pthread_unwind_next(__pthread_unwind_buf_t *buf)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    if (!st || !sched_self())
        REAL(__pthread_unwind_next)(buf);
    st->cleanup = buf->__pad[0];
    sthread_unwind(st);
}
