/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CRC32C (Castagnoli); see crc32c.h.
 *
 * With ISA-L (libisal, found at build time) on a CPU with SSE4.2 and
 * PCLMULQDQ: its crc32_iscsi_01, three streams of the crc32 instruction
 * joined with carry-less multiplication (Gopal et al., "Fast CRC
 * Computation for iSCSI Polynomial Using CRC32 Instruction", Intel, 2011).
 * Otherwise the crc32 instruction one word at a time, which waits out the
 * instruction's latency on every word, else slicing-by-8 in software.
 *
 * Why that variant, by name, rather than ISA-L's dispatched crc32_iscsi:
 * on a CPU with AVX-512 the dispatcher picks crc32_iscsi_by16_10
 * (VPCLMULQDQ on 512-bit registers), fastest alone (60-88 GB/s against
 * 10-14 GB/s for one word at a time, 1472- to 65000-byte buffers, hot in
 * cache) but the slowest in the engine: `sx_bench bw --size 1048576`
 * between two namespace hosts at MTU 1500 gave 1,820-1,890 MB/s with it,
 * 2,390-2,450 with one word at a time, 3,100-3,160 with crc32_iscsi_01
 * and 3,170-3,490 with no payload checksum (SX_CHECKSUM=no), interleaved
 * runs on the 2-core development machine. The wide registers cost the
 * core more (clock and state saved at every switch) than the checksum
 * saves. crc32_iscsi_01 is exported by ISA-L but not declared in its
 * header; CMake checks that the library has it.
 */
#include "common/crc32c.h"

#include <limits.h>
#include <stdatomic.h>
#include <pthread.h>
#include <string.h>

#include "build_config.h"
#include "common/hot.h"
#include "common/le.h"

#if SX_HAVE_ISAL
/* ISA-L's SSE4.2 and PCLMULQDQ variant (see above). */
unsigned int crc32_iscsi_01(unsigned char *buffer, int len, unsigned int init_crc);
#endif

/* Reflected Castagnoli polynomial 0x1EDC6F41, as used by iSCSI (RFC 3720)
 * and by the SSE4.2 crc32 instruction. */
#define SX_CRC32C_POLY 0x82f63b78u

/*
 * Buffers up to this long go through the crc32 instruction one word at a
 * time even where ISA-L's variant is chosen: a packet header's payload
 * checksum of a few to a few hundred bytes. ISA-L's three streams only pay
 * once each has several words to hide the instruction's latency behind,
 * and its code (two pages of another library, reached through the PLT)
 * costs an 8-byte message two TLB misses after every system call on a
 * kernel that flushes the TLB there (hot.h): in `sx_bench latency` those
 * misses are on the answering rank's way from its read to its reply.
 */
#define SX_CRC32C_SHORT 256u

static uint32_t sx_crc32c_table[8][256];
/* 1: software, 2: SSE4.2, 3: ISA-L's; -1 until chosen (once, under
 * sx_crc32c_once; read with acquire, so the table is visible). Not 0, so
 * that it is initialised data, not .bss: there it followed the 8 KB table,
 * a page away from the rest of the library's variables (common/hot.h). */
static _Atomic int sx_crc32c_mode = -1;

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
SX_HOT __attribute__((target("sse4.2"))) static uint32_t sx_crc32c_hw(uint32_t crc,
                                                                      const uint8_t *p, size_t len)
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
    int mode = 1;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        mode = 2;
#if SX_HAVE_ISAL
    if (mode == 2 && __builtin_cpu_supports("pclmul"))
        mode = 3;
#endif
#endif
    if (mode == 1)
        sx_crc32c_init_table();
    atomic_store_explicit(&sx_crc32c_mode, mode, memory_order_release);
}

SX_HOT uint32_t sx_crc32c(uint32_t crc, const void *data, size_t len)
{
    /* pthread_once only until the choice is made: it is a call into libc
     * (another page, see SX_CRC32C_SHORT) for what is a load after. */
    int mode = atomic_load_explicit(&sx_crc32c_mode, memory_order_acquire);
    if (mode < 0) {
        pthread_once(&sx_crc32c_once, sx_crc32c_choose);
        mode = atomic_load_explicit(&sx_crc32c_mode, memory_order_acquire);
    }
    crc = ~crc;
#if defined(__x86_64__)
    if (mode >= 2 && len <= SX_CRC32C_SHORT)
        return ~sx_crc32c_hw(crc, data, len);
#endif
#if SX_HAVE_ISAL
    if (mode == 3) {
        /* The register runs from crc, with neither inversion done inside;
         * the length is an int. */
        const uint8_t *p = data;
        while (len > 0) {
            int n = len > INT_MAX ? INT_MAX : (int)len;
            crc = crc32_iscsi_01((unsigned char *)(uintptr_t)p, n, crc);
            p += n;
            len -= (size_t)n;
        }
        return ~crc;
    }
#endif
#if defined(__x86_64__)
    if (mode == 2)
        return ~sx_crc32c_hw(crc, data, len);
#endif
    return ~sx_crc32c_sw(crc, data, len);
}
