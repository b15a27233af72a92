/*
 * libgoshim_tlsie.so: initial-exec TLS (built with -ftls-model=initial-exec,
 * so the module has DF_STATIC_TLS and its block sits in the static TLS at a
 * fixed offset from the thread pointer). prog_dlopen_ietls dlopens it while
 * threads exist: each must see the initial image (.tdata) and zeros (.tbss).
 */
__thread unsigned char tlsie_bytes[16] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                          0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xf1, 0xf2};
__thread int tlsie_one = 1;
__thread int tlsie_zero[8];

/* The calling thread's view: the bytes into out, tlsie_one, and whether tlsie_zero is zero. */
int tlsie_read(unsigned char out[16], int *zero)
{
    int z = 1;
    for (int i = 0; i < 16; i++)
        out[i] = tlsie_bytes[i];
    for (int i = 0; i < 8; i++)
        z &= tlsie_zero[i] == 0;
    *zero = z;
    return tlsie_one;
}

/* Change the calling thread's copy (another thread's must not see it). */
void tlsie_bump(void)
{
    tlsie_one++;
    tlsie_bytes[0]++;
    tlsie_zero[7] = 5;
}
