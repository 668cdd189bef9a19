/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Little-endian loads and stores at any alignment, for the wire formats
 * (packets, control messages, OOB frames): memcpy plus endian.h, which the
 * compiler turns into single moves on x86.
 */
#ifndef SX_COMMON_LE_H
#define SX_COMMON_LE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void sx_put16(uint8_t *p, uint16_t v)
{
    v = htole16(v);
    memcpy(p, &v, 2);
}

static inline void sx_put32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static inline void sx_put64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

static inline uint16_t sx_get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return le16toh(v);
}

static inline uint32_t sx_get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

static inline uint64_t sx_get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

#endif /* SX_COMMON_LE_H */
