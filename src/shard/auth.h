/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Authenticated datagrams (SX_AUTH): a keyed MAC on every datagram of the
 * network transport, so a forger on the path, who sees every epoch and
 * sequence number in clear, still cannot inject, alter or (across
 * incarnations) replay one.
 *
 * The tag: SipHash-2-4 with a 128-bit output (libsodium's
 * crypto_shorthash_siphashx24) over the whole datagram before it, header
 * and payload, under the job's 128-bit key; 16 bytes after the payload,
 * flagged SX_PKTF_AUTH in the header (payload_len does not count them).
 * SipHash is a PRF (Aumasson and Bernstein, "SipHash: a fast short-input
 * PRF", INDOCRYPT 2012), so it is a MAC; it was chosen over HMAC-SHA256,
 * BLAKE2b and AES-CMAC by measurement (docs/tuning.md, "Authentication":
 * 3 to 8 times cheaper on small datagrams, 1.5 to 2.5 on large ones). No
 * nonce is needed: replays within an incarnation are duplicates to the
 * sequence numbers (DATA), move no state (ACKs and control messages), or
 * answer a challenge whose nonce has changed (RESET); the epochs under
 * the tag bind each datagram to one incarnation of each end.
 *
 * Where the key comes from: SX_AUTH holds it (32 hex digits), or is
 * "job": every engine draws one at creation and sx_engine_join takes
 * rank 0's from its card (engine/card.c), so that one job shares one key
 * that no other job knows. Cards carry a key id (a tag of a fixed text)
 * for sx_peer_add to refuse a peer with another key by name.
 *
 * Synchronization: sx_auth_set_key runs once, before any datagram is
 * sealed or checked with the key (engine creation, or sx_engine_join
 * before its first peer); it publishes with release, and sx_auth_on reads
 * with acquire, so the key is seen whole. The rest is read-only.
 */
#ifndef SX_SHARD_AUTH_H
#define SX_SHARD_AUTH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SX_AUTH_TAG_LEN 16
#define SX_AUTH_KEY_LEN 16
#define SX_AUTH_ID_LEN  8

typedef struct sx_auth {
    bool required;  /* SX_AUTH is set: without the key nothing is taken */
    atomic_bool on; /* the key below is set */
    uint8_t key[SX_AUTH_KEY_LEN];
    uint8_t id[SX_AUTH_ID_LEN];
} sx_auth_t;

/** Whether this build can authenticate (libsodium was found). */
bool sx_auth_available(void);

/** Parses 32 hex digits into a key; false for anything else. */
bool sx_auth_parse_key(const char *hex, uint8_t key[SX_AUTH_KEY_LEN]);

/** A fresh key from the kernel's CSPRNG (getrandom); SX_OK or SX_ERR_IO. */
int sx_auth_draw_key(uint8_t key[SX_AUTH_KEY_LEN]);

/** Sets the key and its id and turns authentication on. Once. */
void sx_auth_set_key(sx_auth_t *auth, const uint8_t key[SX_AUTH_KEY_LEN]);

/** Whether datagrams are sealed and checked now (acquire). */
static inline bool sx_auth_on(const sx_auth_t *auth)
{
    return atomic_load_explicit(&auth->on, memory_order_acquire);
}

/** The tag of @p len bytes at @p data, then of @p len2 at @p data2 (the
 *  datagram in two pieces; @p len2 may be 0), into @p tag. */
void sx_auth_seal(const sx_auth_t *auth, const uint8_t *data, size_t len, const uint8_t *data2,
                  size_t len2, uint8_t tag[SX_AUTH_TAG_LEN]);

/** Whether the last SX_AUTH_TAG_LEN bytes of the @p len bytes at @p dgram
 *  are the tag of what precedes them; compared in constant time. */
bool sx_auth_check(const sx_auth_t *auth, const uint8_t *dgram, size_t len);

/** Writes the key id as 16 hex digits and a NUL into @p out. */
void sx_auth_id_str(const uint8_t id[SX_AUTH_ID_LEN], char out[2 * SX_AUTH_ID_LEN + 1]);

#endif /* SX_SHARD_AUTH_H */
