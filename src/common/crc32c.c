/* CRC32C (Castagnoli); see crc32c.h. */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#include "common/le.h"

/* Reflected Castagnoli polynomial 0x1EDC6F41, as used by iSCSI (RFC 3720)
 * and by the SSE4.2 crc32 instruction. */
#define SX_CRC32C_POLY 0x82f63b78u

static uint32_t sx_crc32c_table[8][256];
static int sx_crc32c_mode; /* 1: software, 2: SSE4.2; set once */

static void sx_crc32c_init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ SX_CRC32C_POLY : c >> 1;
        sx_crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++)
            sx_crc32c_table[t][i] = (sx_crc32c_table[t - 1][i] >> 8) ^
                                    sx_crc32c_table[0][sx_crc32c_table[t - 1][i] & 0xff];
    }
}

/* Slicing-by-8 (Kounavis and Berry, "A Systematic Approach to Building High
 * Performance Software-based CRC Generators", ISCC 2005). */
static uint32_t sx_crc32c_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        uint32_t lo = sx_get32(p) ^ crc;
        uint32_t hi = sx_get32(p + 4);
        crc = sx_crc32c_table[7][lo & 0xff] ^ sx_crc32c_table[6][(lo >> 8) & 0xff] ^
              sx_crc32c_table[5][(lo >> 16) & 0xff] ^ sx_crc32c_table[4][lo >> 24] ^
              sx_crc32c_table[3][hi & 0xff] ^ sx_crc32c_table[2][(hi >> 8) & 0xff] ^
              sx_crc32c_table[1][(hi >> 16) & 0xff] ^ sx_crc32c_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len-- > 0)
        crc = sx_crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t sx_crc32c_hw(uint32_t crc, const uint8_t *p,
                                                               size_t len)
{
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len-- > 0)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

static pthread_once_t sx_crc32c_once = PTHREAD_ONCE_INIT;

static void sx_crc32c_choose(void)
{
    sx_crc32c_mode = 1;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        sx_crc32c_mode = 2;
#endif
    if (sx_crc32c_mode == 1)
        sx_crc32c_init_table();
}

uint32_t sx_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&sx_crc32c_once, sx_crc32c_choose);
    crc = ~crc;
#if defined(__x86_64__)
    if (sx_crc32c_mode == 2)
        return ~sx_crc32c_hw(crc, data, len);
#endif
    return ~sx_crc32c_sw(crc, data, len);
}
