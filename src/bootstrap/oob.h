/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The out-of-band channel (OOB): tagged iovec messages between the
 * processes of a job over TCP, in the shape of Open MPI's mca_oob
 * (../shared/seeds/oob_base.h.txt). Start-up only: the sx_run rendezvous,
 * the modex and the `oob` connection pseudo-component use it; the data
 * path never does.
 *
 * An endpoint has a 64-bit id (an engine uses its epoch; the sx_run
 * launcher is SX_OOB_ID_LAUNCHER) and a TCP listener. A connection opens
 * with a HELLO frame naming the connecting endpoint's id, so the accepting
 * side can answer over it without knowing where the other listens. A
 * message is one frame:
 *
 *   0  u32 magic "SXO1"   4  u32 tag   8  u64 source id
 *  16  u32 payload length (at most SX_OOB_MSG_MAX)
 *  20  u32 CRC32C of bytes 0..19
 *
 * then the payload, little-endian. A frame with a bad magic, checksum or
 * length, or a connection that ends inside a frame, is an error on that
 * connection: it is logged with the peer and the cause and the connection
 * is closed; sends queued on it complete with SX_ERR_PROTO or SX_ERR_IO.
 * Nothing from the wire is trusted before these checks.
 *
 * Threads: each endpoint runs one progress thread (epoll) that accepts,
 * reads and writes. Every function here is safe from any thread.
 * Callbacks of the _nb calls run on that progress thread (or on the
 * calling thread, before the call returns, when the operation can complete
 * at once) and must not call the blocking functions of the same endpoint.
 *
 * Matching: a receive takes the oldest queued message whose source and
 * tag match (SX_OOB_PEER_ANY, SX_OOB_TAG_ANY match anything), in arrival
 * order per connection; posted receives are matched in the order they
 * were posted.
 */
#ifndef SX_BOOTSTRAP_OOB_H
#define SX_BOOTSTRAP_OOB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SX_OOB_MAGIC       0x314f5853u /* "SXO1" */
#define SX_OOB_HDR_LEN     24
#define SX_OOB_MSG_MAX     (16u << 20)
#define SX_OOB_ADDR_MAX    64 /* "host:port" with its NUL */
#define SX_OOB_TAG_ANY     0u
#define SX_OOB_PEER_ANY    UINT64_MAX
#define SX_OOB_ID_LAUNCHER 0u /* the sx_run launcher; engines never use id 0 */

/* Tags at and above SX_OOB_TAG_RESERVED belong to shardx itself. */
#define SX_OOB_TAG_RESERVED 0xffff0000u
#define SX_OOB_TAG_HELLO    0xffff0000u /* first frame of a connection; no payload */
#define SX_OOB_TAG_RDV_PUT  0xffff0001u /* rank -> launcher: u32 rank, u32 size, blob */
#define SX_OOB_TAG_RDV_ALL                                                 \
    0xffff0002u /* launcher -> rank: u32 size, then per rank u32 len, blob \
                 */
#define SX_OOB_TAG_RDV_FENCE 0xffff0003u /* rank -> launcher: u32 rank, u32 round */
#define SX_OOB_TAG_RDV_DONE  0xffff0004u /* launcher -> rank: u32 round */
#define SX_OOB_TAG_RDV_ERROR 0xffff0005u /* launcher -> rank: a message (text) */
#define SX_OOB_TAG_CPC       0xffff0010u /* the `oob` connection pseudo-component */

/* Receive flags, as the seed's MCA_OOB_PEEK and MCA_OOB_TRUNC. */
enum sx_oob_flags {
    SX_OOB_PEEK = 1u << 0,  /* copy, but leave the message queued */
    SX_OOB_TRUNC = 1u << 1, /* report the message's whole length even if it did not fit */
};

typedef struct sx_oob sx_oob_t;

/**
 * Completion of a send or receive. @p status: SX_OK; SX_ERR_TRUNCATED
 * (receive: the message was longer than the buffers; what fit was copied);
 * SX_ERR_IO / SX_ERR_PROTO (the connection failed; a receive from one
 * endpoint, not SX_OOB_PEER_ANY, also when the last connection to that
 * endpoint closed, cleanly or not); SX_ERR_SHUTDOWN (the endpoint closed
 * first). @p len: bytes sent or copied, or with
 * SX_OOB_TRUNC the message's whole length. @p peer and @p tag: the
 * message's source (or destination) and tag.
 */
typedef void (*sx_oob_cb_t)(void *arg, int status, uint64_t peer, uint32_t tag, size_t len);

/** Opens endpoint @p self_id listening on @p bind_host (NULL: 127.0.0.1)
 *  port @p port (0: any), and starts its progress thread. */
int sx_oob_open(uint64_t self_id, const char *bind_host, uint16_t port, sx_oob_t **oob_p);

/**
 * An address for an OOB endpoint when none is configured: the source
 * address of the route towards @p toward ("host:port", e.g. sx_run's
 * rendezvous; NULL: none), else the first IPv4 address of an interface
 * that is up and not loopback, else 127.0.0.1. Writes it to @p host (at
 * most @p cap bytes). Any thread; may block in name resolution.
 */
void sx_oob_pick_host(const char *toward, char *host, size_t cap);

/** Closes every connection, completes every pending operation with
 *  SX_ERR_SHUTDOWN, joins the thread and frees the endpoint. Not from a
 *  callback. */
void sx_oob_close(sx_oob_t *oob);

/** The listener's address as "host:port" (at most SX_OOB_ADDR_MAX bytes
 *  with the NUL). */
int sx_oob_address(sx_oob_t *oob, char *buf, size_t len);

uint64_t sx_oob_id(const sx_oob_t *oob);

/** Tells the endpoint where @p peer listens ("host:port"); the connection
 *  is made at the first send to it. SX_ERR_INVALID_PARAM for a malformed
 *  address. A peer that connected to us needs no address. */
int sx_oob_peer_set(sx_oob_t *oob, uint64_t peer, const char *addr);

/** Sends the concatenation of @p iov to @p peer. Blocks until the bytes are
 *  handed to the kernel, the connection fails, or @p timeout_ms passes
 *  (-1: no limit; SX_ERR_AGAIN then, and the message may still go out). */
int sx_oob_send(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov, int iovcnt,
                int timeout_ms);

/** The same without waiting: the payload is copied before the call
 *  returns; @p cb (may be NULL) runs once when it is sent or failed. */
int sx_oob_send_nb(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov, int iovcnt,
                   sx_oob_cb_t cb, void *arg);

/**
 * The same message to each of @p npeers endpoints, its @p len bytes
 * copied once and shared by the sends (the launcher's RDV_ALL, one per
 * rank: a copy per rank took up to 16 MiB times the ranks). @p cb runs
 * once per queued send. Every peer is tried; the first failure is
 * returned (SX_ERR_INVALID_PARAM for an invalid peer among them) and
 * *queued_p (may be NULL) says how many were queued.
 */
int sx_oob_send_many_nb(sx_oob_t *oob, const uint64_t *peers, size_t npeers, uint32_t tag,
                        const void *data, size_t len, sx_oob_cb_t cb, void *arg, size_t *queued_p);

/** Payload bytes this endpoint's sends have copied so far (tests). */
uint64_t sx_oob_copied_bytes(sx_oob_t *oob);

/**
 * Receives the first message matching *peer_p and *tag_p into @p iov,
 * waiting up to @p timeout_ms (-1: no limit; SX_ERR_AGAIN when it passes).
 * On return *peer_p and *tag_p name the message and *len_p is what the
 * callback's len would be. Returns the status the callback would get.
 */
int sx_oob_recv(sx_oob_t *oob, uint64_t *peer_p, uint32_t *tag_p, const struct iovec *iov,
                int iovcnt, unsigned flags, int timeout_ms, size_t *len_p);

/** Posts a receive; @p cb runs once with the matched message. The iovec
 *  memory must stay valid until then. */
int sx_oob_recv_nb(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov, int iovcnt,
                   unsigned flags, sx_oob_cb_t cb, void *arg);

/**
 * A handler for every message with @p tag that no posted receive matches,
 * run on the progress thread with the payload (valid during the call).
 * For servers (the launcher's rendezvous, the oob CPC). NULL removes it.
 */
typedef void (*sx_oob_handler_t)(void *arg, uint64_t peer, uint32_t tag, const void *data,
                                 size_t len);
int sx_oob_handler_set(sx_oob_t *oob, uint32_t tag, sx_oob_handler_t handler, void *arg);

/**
 * Runs @p cb once when no connection to endpoint @p peer (not
 * SX_OOB_PEER_ANY) is left, after every message that came on them was
 * handed on: with the connection's status (SX_ERR_IO, SX_ERR_PROTO;
 * SX_ERR_IO at the progress thread's next turn if none is open now), or
 * SX_ERR_SHUTDOWN when this endpoint closes first. Never inside this
 * call. Its tag is 0, its length 0. For servers that must know a
 * client has gone (the launcher's rendezvous: a rank that ended). Any
 * thread, a handler's too; watching is quiet, where a failed receive is
 * logged.
 */
int sx_oob_watch(sx_oob_t *oob, uint64_t peer, sx_oob_cb_t cb, void *arg);

#endif /* SX_BOOTSTRAP_OOB_H */
