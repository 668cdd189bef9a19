/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rdmacm: the connection manager's address resolution for the verbs
 * transport (issue 7), in the shape of Open MPI's openib `rdma_cm` CPC
 * (../shared/seeds/openib_cpc_connect.h.txt). This header holds what the
 * component puts on the wire and takes from it, as pure functions that the
 * tests exercise without an RDMA device; rdmacm.c is the component.
 *
 * Why a connection manager for datagrams at all: a verbs card address is a
 * queue pair behind a port's static GID and LID. Within one InfiniBand
 * subnet that is a path; across subnets, and on RoCE where the GID must be
 * the one the IP route needs, the path (DLID, SL, the GID and whether a
 * GRH is needed) comes from the subnet administrator or the IP routing
 * table, and librdmacm asks them for us. With RDMA_PS_UDP the exchange is
 * IB's SIDR (Service ID Resolution; IBTA vol. 1, chapter 12, communication
 * management): the client's
 * rdma_connect sends a SIDR REQ to the peer's listener, the listener's
 * rdma_accept answers with the queue pair number, and the client's
 * ESTABLISHED event carries the address handle attributes of the path.
 *
 * The card blob (the peer's listener), little-endian, 8 or 20 bytes:
 *
 *    0  u8   version   1
 *    1  u8   family    4 or 6
 *    2  u16  port      the listener's port, not 0
 *    4  4 or 16 bytes  the IPv4 or IPv6 address, in network order
 *
 * The private data of the SIDR REQ and REP, little-endian, 20 bytes (the
 * connection manager pads it to its fixed size; what follows is ignored):
 *
 *    0  u32  magic     SX_RDMACM_MAGIC
 *    4  u8   version   1
 *    5  u8   kind      SX_RDMACM_REQ or SX_RDMACM_REP
 *    6  u16  shard     REQ: the shard the client wants; REP: the same, echoed
 *    8  u32  qpn       REP: that shard's UD queue pair number; REQ: 0
 *   12  u32  qkey      REP: the Q_Key it accepts; REQ: 0
 *   16  u8   port      REP: its port number on its device; REQ: 0
 *   17  u8   flags     REP: SX_RDMACM_REP_*; REQ: 0
 *   18  u8[2]          reserved, zero
 *
 * The REP carries the Q_Key itself because the connection manager's own
 * (the ESTABLISHED event's qkey) is RDMA_UDP_QKEY for every RDMA_PS_UDP
 * identifier, whatever Q_Key the transport's queue pair was created with.
 */
#ifndef SX_CPC_RDMACM_H
#define SX_CPC_RDMACM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "build_config.h"
#include "transports/verbs_addr.h"

#define SX_RDMACM_BLOB_VERSION 1
#define SX_RDMACM_BLOB_V4_LEN  8
#define SX_RDMACM_BLOB_V6_LEN  20

#define SX_RDMACM_MAGIC    0x4d435853u /* "SXCM" */
#define SX_RDMACM_VERSION  1
#define SX_RDMACM_PRIV_LEN 20

enum { SX_RDMACM_REQ = 1, SX_RDMACM_REP = 2 };

/* REP flags. ELSEWHERE: the shard's queue pair is behind another port than
 * the listener's (an engine whose shards use several devices), so the
 * path the connection manager found, which ends at the listener's port,
 * does not lead to it: the client keeps the card's address. */
#define SX_RDMACM_REP_ELSEWHERE 0x01u

/** A decoded private data block. */
typedef struct sx_rdmacm_priv {
    uint8_t kind; /* SX_RDMACM_REQ or SX_RDMACM_REP */
    uint16_t shard;
    uint32_t qpn;
    uint32_t qkey;
    uint8_t port;
    uint8_t flags; /* REP: SX_RDMACM_REP_* */
} sx_rdmacm_priv_t;

/** Writes "a.b.c.d:port" or "[v6]:port" for @p sa into @p buf, for log
 *  lines. */
void sx_rdmacm_sockaddr_str(const struct sockaddr *sa, char *buf, size_t cap);

/**
 * Encodes a listener's address (an AF_INET or AF_INET6 sockaddr) as a card
 * blob into @p out (@p cap bytes); sets *len_p. SX_ERR_INVALID_PARAM for
 * another family, port 0, or an address a peer could not reach (see
 * sx_rdmacm_blob_parse), so that no card carries a blob its peers refuse.
 */
int sx_rdmacm_blob_write(const struct sockaddr *sa, uint8_t *out, size_t cap, uint8_t *len_p);

/**
 * Decodes a peer's card blob, untrusted, into *ss (a sockaddr_in or
 * sockaddr_in6). SX_ERR_INVALID_PARAM, with *why_p naming the fault, for a
 * wrong length, version or family, port 0, or an address that names no
 * remote listener: unspecified, loopback, multicast, broadcast, or IPv6
 * link-local (which needs an interface a card cannot name). Writes *ss
 * only on SX_OK.
 */
int sx_rdmacm_blob_parse(const uint8_t *in, size_t len, struct sockaddr_storage *ss,
                         const char **why_p);

/** Writes SX_RDMACM_PRIV_LEN bytes of @p p to @p out. */
void sx_rdmacm_priv_write(uint8_t *out, const sx_rdmacm_priv_t *p);

/**
 * Decodes private data from the connection manager, untrusted: SX_OK, or
 * SX_ERR_PROTO with *why_p naming the fault for a short block, a wrong
 * magic, version or kind (@p kind is the one expected), non-zero reserved
 * bytes, a shard not below @p nshards, a REQ with a REP's fields set, or in
 * a REP a QPN that is 0, 1 (the special queue pairs) or over 24 bits, port
 * 0, or unknown flags. Writes *p only on SX_OK.
 */
int sx_rdmacm_priv_parse(const void *in, size_t len, uint8_t kind, unsigned nshards,
                         sx_rdmacm_priv_t *p, const char **why_p);

#if SX_HAVE_VERBS
struct ibv_ah_attr;

/**
 * The verbs card address of a peer's queue pair as the connection manager
 * found the path to it: the GID from the GRH (and SX_VERBS_ADDR_GLOBAL)
 * when the path needs one, the DLID and SL, with the queue pair number,
 * Q_Key and port of the peer's answer. SX_ERR_INVALID_PARAM, with *why_p,
 * for a QPN that is 0, 1 or over 24 bits, port 0, or a path with neither
 * a GRH nor a LID. Pure: @p ah is read, nothing else.
 */
int sx_rdmacm_path_addr(const struct ibv_ah_attr *ah, uint32_t qpn, uint32_t qkey, uint8_t port,
                        sx_verbs_addr_t *out, const char **why_p);
#endif

#endif /* SX_CPC_RDMACM_H */
