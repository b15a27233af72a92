/*
 * libgoshim_tlsmod.so: a library prog_tcb_block dlopen()s while threads
 * exist. Its __thread variables are dynamic TLS (global-dynamic model,
 * reached through each thread's DTV and __tls_get_addr), so they test
 * that a thread's DTV follows the loader's generation counter.
 */
static __thread long mod_value = 4242;
static __thread char mod_buf[256] = "tlsmod";

long tlsmod_get(void)
{
    return mod_value;
}

void tlsmod_set(long v)
{
    mod_value = v;
    mod_buf[0] = (char)('a' + (v & 15));
}

/* The block's address: distinct per thread. */
void *tlsmod_addr(void)
{
    return mod_buf;
}

int tlsmod_buf_ok(long v)
{
    return mod_buf[0] == (char)('a' + (v & 15)) && mod_buf[1] == 'l';
}
