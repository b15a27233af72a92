/*
 * Starting the runtime in the scheduler's unit tests (each test is its own process, so
 * each starts it afresh).
 */
#ifndef GOSHIM_TESTS_RT_START_H
#define GOSHIM_TESTS_RT_START_H

#include <criterion/criterion.h>

#include "sched/sched.h"

/* The runtime with nprocs Ps, the rest of its configuration from the environment. */
static inline void test_start_runtime(int nprocs)
{
    struct sched_config c;
    sched_config_from_env(&c);
    c.nprocs = nprocs;
    cr_assert_eq(sched_init(&c), 0);
}

#endif
