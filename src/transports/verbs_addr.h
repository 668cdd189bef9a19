/*
 * verbs: the device-independent parts of the verbs transport (issue 7),
 * kept apart from verbs.c so that they are unit-tested on machines without
 * an RDMA device: the card address of a UD queue pair, the address-handle
 * cache, and the sizing of queues from what a device reports.
 *
 * Nothing here calls libibverbs; the AH cache creates and destroys handles
 * through callbacks, which verbs.c points at ibv_create_ah/ibv_destroy_ah
 * and the tests at counters.
 *
 * Synchronization: an AH cache belongs to one interface and is used by its
 * shard's token holder only; the address functions are pure.
 */
#ifndef SX_TRANSPORTS_VERBS_ADDR_H
#define SX_TRANSPORTS_VERBS_ADDR_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of an encoded address in a business card (see verbs_addr.c for
 * the layout). */
#define SX_VERBS_ADDR_LEN 30

/* flags */
#define SX_VERBS_ADDR_GLOBAL 0x01u /* a GRH is needed: RoCE, or another IB subnet */

/** One UD queue pair as a peer reaches it. */
typedef struct sx_verbs_addr {
    uint8_t gid[16]; /* port GID (RoCE: the IP address as a GID) */
    uint16_t lid;    /* port LID; 0 on RoCE */
    uint32_t qpn;    /* queue pair number, 24 bits */
    uint32_t qkey;   /* Q_Key the queue pair accepts */
    uint8_t port;    /* port number on its device, 1.. */
    uint8_t sl;      /* service level to send with */
    uint8_t flags;   /* SX_VERBS_ADDR_* */
} sx_verbs_addr_t;

/** Encodes @p a into @p buf (at least SX_VERBS_ADDR_LEN bytes of @p cap);
 *  sets *len_p. SX_ERR_INVALID_PARAM for a QPN over 24 bits or a short
 *  buffer. */
int sx_verbs_addr_encode(const sx_verbs_addr_t *a, void *buf, size_t cap, size_t *len_p);

/** Decodes card bytes, untrusted: SX_ERR_INVALID_PARAM for a wrong length,
 *  an unknown version, reserved bits set, QPN 0 or 1 (the special QPs), or
 *  a LID of 0 without the global flag. Writes *a only on SX_OK. */
int sx_verbs_addr_decode(const void *buf, size_t len, sx_verbs_addr_t *a);

/** Readable form, "lid 0x12 qpn 0x1234 gid fe80::...": at most @p cap bytes
 *  with the NUL; a malformed address prints as "invalid verbs address". */
void sx_verbs_addr_str(const void *buf, size_t len, char *out, size_t cap);

#endif /* SX_TRANSPORTS_VERBS_ADDR_H */
