/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CRC32C (Castagnoli, RFC 3720 appendix B.4): the payload checksum of the
 * wire format (src/shard/wire.h) and of OOB frames (src/bootstrap/). The
 * SSE4.2 crc32 instruction when the CPU has it, else slicing-by-8 in
 * software; the choice is made once, on first use.
 *
 * Synchronization: any thread; no state after the one-time choice.
 */
#ifndef SX_COMMON_CRC32C_H
#define SX_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/** Extends @p crc (0 to start) over @p len bytes at @p data. */
uint32_t sx_crc32c(uint32_t crc, const void *data, size_t len);

#endif /* SX_COMMON_CRC32C_H */
