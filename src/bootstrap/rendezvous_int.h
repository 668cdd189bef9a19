/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rendezvous server's message handlers (rendezvous.c), which parse
 * everything the ranks send it. The server registers them on its OOB
 * endpoint and they run on its progress thread; they are declared here so
 * that fuzz/fuzz_rendezvous.c can hand them payloads directly, the way
 * the OOB would, without a TCP connection per message. Nothing else calls
 * them. Each takes the server's lock, so any thread may call them.
 */
#ifndef SX_BOOTSTRAP_RENDEZVOUS_INT_H
#define SX_BOOTSTRAP_RENDEZVOUS_INT_H

#include <stddef.h>
#include <stdint.h>

/** RDV_PUT from endpoint @p peer: u32 rank, u32 size, blob. @p arg is the
 *  sx_rdv_server_t. */
void sx_rdv_on_put(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len);

/** RDV_FENCE from endpoint @p peer: u32 rank, u32 round. */
void sx_rdv_on_fence(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len);

#endif /* SX_BOOTSTRAP_RENDEZVOUS_INT_H */
