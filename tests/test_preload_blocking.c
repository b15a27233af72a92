/*
 * Blocking system calls under LD_PRELOAD hand their P to another M: with
 * a single P, a thread blocked in read() or waitpid() must not stop the
 * thread that will unblock it.
 */
#include <criterion/criterion.h>

#include "tests/preload_helpers.h"

Test(preload_blocking, blocked_thread_gives_up_its_p, .timeout = 60)
{
    same_as_native_in_order("prog_blocking", "GOSHIM_PROCS=1", 3);
}

Test(preload_blocking, wrapped_call_inside_a_handler_inside_a_wrapped_call, .timeout = 60)
{
    same_as_native_in_order("prog_signal_in_syscall", NULL, 2);
}
