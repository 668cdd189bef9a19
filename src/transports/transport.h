/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The transport interface: unreliable datagrams between shards.
 *
 * A transport (udp, self, fault, ofi, verbs) is a const ops table; each
 * shard opens its own interface of it, so no interface is ever shared
 * between shards and none of these calls needs a lock. Reliability,
 * ordering and channels live above (src/shard/); a transport only moves
 * datagrams of at most `mtu` bytes, may drop, duplicate or reorder them,
 * and must never hand up a datagram longer than it received.
 *
 * Synchronization: every slot is called by the holder of the owning
 * shard's token, except where a slot's comment says otherwise. No slot
 * blocks unless its comment says so. Fast-path slots (post_send, poll) are
 * never NULL.
 *
 * Buffers: post_send copies or transmits the datagram before it returns
 * when caps.sync_send is set (udp, self, fault over them); otherwise the
 * iovec memory must stay untouched until poll reports the send's context
 * as completed. Received datagrams stay valid until the next poll call on
 * the same interface; a caller that keeps data copies it.
 */
#ifndef SX_TRANSPORTS_TRANSPORT_H
#define SX_TRANSPORTS_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Bytes of a transport address in a business card: room for udp's list of
 * eight addresses, IPv6 ones included (14 + 1 + 8 x 17 = 151, udp_card.c). */
#define SX_TL_ADDR_MAX   160
#define SX_TL_NAME_MAX   16
#define SX_TL_IOV_MAX    4 /* iovec entries per datagram */
#define SX_TL_DEST_NONE  UINT32_MAX
#define SX_TL_DETAIL_MAX 192 /* bytes of a query's description, with the NUL */
#define SX_TL_DEVICE_MAX 64  /* bytes of a device name ("mlx5_0", "eth0"), with the NUL */
#define SX_TL_DEVICES    16  /* devices a transport lists for NIC locality, at most */
#define SX_TL_LAND_SPANS 4   /* spans of one landing offer (sx_tl_ops_t.land), at most */
#define SX_TL_WAIT_FDS   4   /* fds an interface hands out to sleep on (wait_fds), at most */

/*
 * Exclusivity (Open MPI's BTL selection): among the network transports an
 * engine may run, the available one with the highest exclusivity is
 * selected; self, the highest of all, reaches only the engine itself. A
 * transport states it per query, since what it found may change its claim
 * (ofi over a NIC's own provider claims more than ofi over libfabric's
 * emulation on kernel sockets).
 */
#define SX_TL_EXCL_SELF    1000 /* this engine itself */
#define SX_TL_EXCL_HW      500  /* a fabric device of its own: verbs, ofi over a NIC provider */
#define SX_TL_EXCL_SOCKETS 100  /* kernel UDP sockets: udp */
/* A library's emulation over kernel sockets: ofi's udp, sockets and tcp
 * providers, never preferred to udp. */
#define SX_TL_EXCL_EMULATED 50
#define SX_TL_EXCL_SINK     1 /* no network (sink): only when nothing else is allowed */

typedef struct sx_tl_iface sx_tl_iface_t;
typedef struct sx_tl_ops sx_tl_ops_t;

/** A resolved destination: an index into the interface's address table. */
typedef uint32_t sx_tl_dest_t;

/** What an interface can do; filled in by open. */
typedef struct sx_tl_caps {
    size_t mtu;          /* largest datagram payload, in bytes */
    size_t inline_limit; /* datagrams up to this size go out without a copy wait */
    unsigned tx_credits; /* datagrams that may be in flight to the NIC at once */
    int sync_send;       /* 1: post_send is done with the buffers when it returns */
    size_t rx_buffer;    /* bytes the receive queue holds (udp: SO_RCVBUF as the kernel
                          * reports it); 0: unknown or unbounded */
} sx_tl_caps_t;

/** Per-interface options, from the engine configuration. */
typedef struct sx_tl_config {
    unsigned shard;   /* index of the owning shard */
    unsigned nshards; /* shards in the engine */
    /* udp: SX_BIND_ADDR: one local IPv4 address to bind ("a.b.c.d[:port]"),
     * or NULL/"" for every up interface, or a filter of them ("eth0",
     * "10.1.0.0/16", "^docker0"; udp_addrs.c) */
    const char *bind_addr;
    size_t rcvbuf;        /* udp: requested SO_RCVBUF in bytes; 0 = leave default */
    size_t sndbuf;        /* udp: requested SO_SNDBUF in bytes; 0 = leave default */
    int ack_socket;       /* udp: 1 = open a second socket for control datagrams */
    unsigned udp_connect; /* udp: destinations given a connected send socket */
    bool udp_gso;         /* udp: UDP GSO on send and GRO on receive, if the kernel can */
    bool udp_hot;         /* udp: a hot socket for the last run's destination (udp_hot.c) */
    /* udp: ECN (RFC 3168): data datagrams leave marked ECT(0) and every
     * received one reports its ECN field (sx_tl_event_t.ecn). Only for a
     * sender that answers CE marks (congestion control on): a router that
     * marks instead of dropping trusts the sender to slow down. */
    bool ecn;
    const char *fault;            /* fault: the SX_FAULT specification */
    const sx_tl_ops_t *inner_ops; /* fault: the transport it decorates */
    void *self_domain;            /* self: the engine-wide rendezvous for self interfaces */
    const char *ofi_provider;     /* ofi: SX_OFI_PROVIDER; NULL or "" = the best found */
    /* SX_NET_DEVICES: a comma-separated list of device names the
     * transport may use ("mlx5_0,mlx5_1", "eth0"); NULL or "" = any. A
     * transport with a devices slot lists only these. */
    const char *net_devices;
    /* The device this shard's interface opens, chosen by the engine's NIC
     * locality (src/engine/topo.h) among those the devices slot listed;
     * NULL = the transport's own default (its first device, or for udp
     * the bind address). */
    const char *device;
    /* fault and udp: says whether a datagram is a control datagram (a pure
     * ACK): fault applies ctrl_loss and ctrl_blackout to those, udp sends
     * them on its ACK path. Called on iov[0] of each tx only, so a wire
     * header that tells control from data must sit whole in iov[0]. NULL:
     * nothing is control. Called by the sending shard's token holder; must
     * not block. */
    int (*is_control)(const void *data, size_t len);
    /* sink: writes the ACK a peer that got every packet would answer a
     * datagram with (iov[0] of a tx, which holds the wire header whole)
     * and its sequence number; false: the datagram needs no answer. The
     * shard layer passes sx_wire_reflect_ack; the sink itself knows nothing
     * of the wire format. */
    bool (*reflect)(const uint8_t *pkt, size_t len, uint8_t *ack_out, uint32_t *seq_p);
} sx_tl_config_t;

/** One datagram to send. */
typedef struct sx_tl_tx {
    sx_tl_dest_t dest;
    struct iovec iov[SX_TL_IOV_MAX];
    unsigned iovcnt;
    void *ctx; /* reported back by poll on completion when !caps.sync_send */
} sx_tl_tx_t;

/** One event from poll: a received datagram, or a completed send. */
typedef enum sx_tl_event_type {
    SX_TL_EV_RECV = 1,
    SX_TL_EV_SEND_DONE = 2,
} sx_tl_event_type_t;

typedef struct sx_tl_event {
    sx_tl_event_type_t type;
    int status;          /* SX_OK, or why a send failed */
    const uint8_t *data; /* RECV: the datagram; valid until the next poll */
    size_t len;          /* RECV: its length */
    void *ctx;           /* SEND_DONE: the tx's ctx */
    const void *src;     /* RECV: where it came from, as the transport's
                          * src_matches reads it (udp: a sockaddr); valid
                          * until the next poll; NULL when it cannot say */
    size_t src_len;
    uint8_t ecn; /* RECV: the ECN field of its IP header (SX_TL_ECN_*);
                  * SX_TL_ECN_NOT_ECT when the transport cannot say */
    /* RECV: bytes of the datagram that went to a landing the caller
     * offered (sx_tl_ops_t.land) instead of into data: bytes head ..
     * head + landed of it are at landed_at, and data[head .. head +
     * landed) is room of that size the caller may copy them back to (the
     * buffer is the transport's, writable for this purpose); the bytes
     * before and after are in data as usual. 0: the whole datagram is in
     * data. */
    size_t landed;
    uint8_t *landed_at;
} sx_tl_event_t;

/** The two ECN bits of an IP header (RFC 3168 section 5). */
enum { SX_TL_ECN_NOT_ECT = 0, SX_TL_ECN_ECT1 = 1, SX_TL_ECN_ECT0 = 2, SX_TL_ECN_CE = 3 };

/** Counters every interface keeps; read by its owner. */
typedef struct sx_tl_stats {
    uint64_t tx_datagrams;
    uint64_t rx_datagrams;
    uint64_t tx_again;        /* post_send refused for lack of space */
    uint64_t rx_truncated;    /* datagrams longer than the mtu, dropped */
    uint64_t rx_kernel_drops; /* udp: SO_RXQ_OVFL: dropped by a full socket buffer;
                               * self: dropped by a full destination queue */
    uint64_t tx_refused;      /* udp: ECONNREFUSED, or on a connected send socket another
                               * ICMP error, reported for an earlier datagram and ignored;
                               * self: sent to a closed interface and dropped */
    uint64_t tx_ack_path;     /* udp: control datagrams sent through our ACK socket or to
                               * the peer's (counted in tx_datagrams too) */
    uint64_t rx_ack_socket;   /* udp: datagrams received on the ACK socket (counted in
                               * rx_datagrams too) */
    uint64_t tx_gso;          /* udp: sends that carried several datagrams (UDP GSO) */
    uint64_t tx_gso_joined;   /* udp: datagrams of those sends that followed the one before
                               * in memory and went in its iovec */
    uint64_t rx_gro;          /* udp: reads that returned several datagrams (UDP GRO) */
    uint64_t rx_hot;          /* udp: datagrams received on the hot socket (counted in
                               * rx_datagrams too) */
    uint64_t hot_connects;    /* udp: times the hot socket was connected to a destination */
} sx_tl_stats_t;

/** What a transport's query found (see sx_tl_ops_t.query). */
typedef struct sx_tl_query {
    unsigned exclusivity;          /* see SX_TL_EXCL_* */
    char detail[SX_TL_DETAIL_MAX]; /* what it found, or why it cannot run */
} sx_tl_query_t;

struct sx_tl_ops {
    const char *name;

    /** Exclusivity when query is NULL; see SX_TL_EXCL_*. */
    unsigned exclusivity;

    /**
     * Says whether the transport can run here with @p config, and how
     * strongly it claims peers (q->exclusivity), before any interface is
     * opened; fills q->detail either way. @p named: SX_TRANSPORTS is set
     * and allows the transport; when false (the default list), a transport
     * whose discovery is costly may decline after a cheap check that it
     * could not win. SX_OK, or SX_ERR_NO_DEVICE (or the parameter's error)
     * when it cannot run. May block briefly (device discovery); any thread.
     * May be NULL: always available, at `exclusivity`.
     */
    int (*query)(const sx_tl_config_t *config, int named, sx_tl_query_t *q);

    /** Opens the interface of one shard. May block briefly (socket set-up).
     *  Writes *iface_p only on SX_OK. */
    int (*open)(const sx_tl_config_t *config, sx_tl_iface_t **iface_p);

    /** Closes it; sends not yet completed are dropped. */
    void (*close)(sx_tl_iface_t *iface);

    /** Writes the interface's address (for the business card) to @p buf,
     *  at most *len_p bytes; sets *len_p to the length. Any thread after
     *  open (the address never changes). */
    int (*local_addr)(sx_tl_iface_t *iface, void *buf, size_t *len_p);

    /** Resolves a peer interface's address into a destination handle.
     *  SX_ERR_INVALID_PARAM for a malformed address. */
    int (*addr_insert)(sx_tl_iface_t *iface, const void *addr, size_t len, sx_tl_dest_t *dest_p);

    /** Writes a card address in readable form ("127.0.0.1:40000") for
     *  diagnoses; at most @p cap bytes with the NUL. Any thread; never
     *  blocks. May be NULL (callers then print the bytes in hex). */
    void (*addr_str)(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf, size_t cap);

    /**
     * Says whether a peer interface's card address is usable from this
     * interface, without inserting it: SX_OK, SX_ERR_INVALID_PARAM when it
     * is malformed, SX_ERR_PEER_UNREACHABLE when it is well formed but of
     * another kind this interface cannot reach (another address family or
     * format). Logs nothing; the caller explains. Any thread; never blocks.
     * May be NULL (only addr_insert can tell).
     */
    int (*addr_check)(sx_tl_iface_t *iface, const void *addr, size_t len);

    /**
     * Writes the variant of the transport this interface runs, which a
     * peer's interface must run too (ofi: the provider, "udp"), NUL
     * terminated, at most @p cap bytes with the NUL; it goes into the
     * business card beside the transport's name. Any thread after open.
     * May be NULL: the transport has one variant.
     */
    void (*variant)(sx_tl_iface_t *iface, char *buf, size_t cap);

    /**
     * Lists the devices this transport could open here, after
     * config->net_devices' restriction, for the engine's NIC locality:
     * writes up to @p max names (SX_TL_DEVICE_MAX bytes each, NUL
     * terminated) and returns how many; 0 when the transport has no
     * device to choose (udp without SX_NET_DEVICES, self, sink) or found
     * none; a negative status, logged, when discovery fails (the engine
     * creation then fails with it). Called before any interface is
     * opened, after a successful query. Any thread; may block briefly
     * (device discovery). May be NULL: the transport never chooses a
     * device.
     */
    int (*devices)(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max);

    /** Forgets a destination; later sends to it fail with
     *  SX_ERR_INVALID_PARAM. */
    void (*addr_remove)(sx_tl_iface_t *iface, sx_tl_dest_t dest);

    /**
     * The largest datagram payload towards @p dest as far as this host
     * knows (udp: the MTU of its route), at most caps.mtu; the handshake's
     * probe confirms it. Token holder; never blocks. May be NULL: caps.mtu
     * for every destination.
     */
    size_t (*dest_mtu)(sx_tl_iface_t *iface, sx_tl_dest_t dest);

    /**
     * Whether datagrams to @p dest never leave this host's memory (udp: it
     * sends to the peer's loopback address, which it chose because the
     * peer's card names this host and network namespace; self: the same
     * process): no wire, no NIC, so the payload's CRC32C would guard
     * nothing the kernel's own copy does not, and channels leave it out
     * (SX_CHECKSUM). Token holder; never blocks. May be NULL: they leave
     * the host (decorators such as fault, which corrupts on purpose, stand
     * for a network and leave it NULL).
     */
    bool (*dest_local)(sx_tl_iface_t *iface, sx_tl_dest_t dest);

    /**
     * A key that names the host @p dest's datagrams go to, the same for
     * every destination there (udp: its IP address, hashed), or 0 when
     * it cannot tell: congestion control shares one window among the
     * channels to one host (shard/cc.h). Token holder; never blocks. May
     * be NULL, as 0: each peer then counts as a host of its own.
     */
    uint64_t (*dest_host)(sx_tl_iface_t *iface, sx_tl_dest_t dest);

    /**
     * From now on, each received datagram's event carries its ECN field
     * (udp, when config->ecn: IP_RECVTOS and IPV6_RECVTCLASS); until the
     * first call, events say Not-ECT. Channels call it when the first of
     * them on this interface uses congestion control, so that a job whose
     * channels all stay on this host does not pay for a control message on
     * every read: a loopback ping-pong's half round trip was 5.11 us with
     * it and 4.95 without (sx_bench latency, 6 rounds each, interleaved).
     * Token holder; a system call per socket on the first call, nothing
     * after. May be NULL: the transport reports no ECN field.
     */
    void (*ecn_report)(sx_tl_iface_t *iface);

    /** Writes the address @p dest sends to now, readable ("udp
     *  10.1.0.2:40000"), for diagnoses; at most @p cap bytes with the NUL.
     *  Token holder; never blocks. May be NULL (callers print the card's
     *  address with addr_str). */
    void (*dest_str)(sx_tl_iface_t *iface, sx_tl_dest_t dest, char *buf, size_t cap);

    /**
     * Moves @p dest to the next of the peer's addresses it could reach
     * (the card offered several and the current one got no answer): SX_OK
     * with "udp A -> udp B" in @p why, SX_ERR_NOT_FOUND when it has tried
     * them all (it then goes back to the first). Datagrams sent before stay
     * sent. Token holder; may make a socket. May be NULL: one address.
     */
    int (*addr_next)(sx_tl_iface_t *iface, sx_tl_dest_t dest, char *why, size_t cap);

    /**
     * Says whether a datagram from @p src (an event's src and src_len)
     * may come from @p dest's peer: from one of the addresses its card
     * offered (udp: the IP address; the port may be a connected send
     * socket's). The shard drops the others (drop_source). Token holder;
     * never blocks. May be NULL: the transport cannot tell where a
     * datagram came from (self, and ofi and verbs, whose receive
     * completions name no source here).
     */
    bool (*src_matches)(sx_tl_iface_t *iface, sx_tl_dest_t dest, const void *src, size_t src_len);

    /**
     * Sends up to @p count datagrams, in order, without blocking. Sets
     * *posted_p to how many were taken. Returns SX_OK when all were taken,
     * SX_ERR_AGAIN when the interface is out of room (retry after a poll),
     * or an error for tx[*posted_p] (bad destination, datagram over the
     * mtu); datagrams after it were not taken. Fast path; never NULL.
     */
    int (*post_send)(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                     unsigned *posted_p);

    /**
     * Reports up to @p max events: received datagrams and, for
     * interfaces without sync_send, completed sends. Returns how many, or
     * a negative status for a fatal interface error. Sets iface->rx_left
     * when it returns fewer than @p max yet may have left datagrams queued
     * that arrived before it began (udp reads one datagram a poll after a
     * quiet spell); one that reads until its queue is empty or @p max
     * events are reported leaves it false. Never blocks. Fast path; never
     * NULL.
     */
    int (*poll)(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max);

    /**
     * Offers landings for the datagrams the next poll reads from its data
     * socket (Open MPI's usnic BTL and RDMA NICs place a payload where the
     * request said it goes; a socket can, when the caller knows before the
     * read where the next payloads belong, as for the next chunks of GET
     * answers and of a PUT): @p spans, in order, cut into pieces of @p step bytes (a
     * span's last piece may be shorter), are the landings of the
     * datagrams read, the k-th datagram's the k-th piece. A datagram
     * longer than @p head bytes puts its bytes from @p head on, at most a
     * piece's worth, into its piece rather than into the event's buffer;
     * the event's `landed` and `landed_at` say how many went where. The
     * kernel writes them whatever each datagram turns out to be, so the
     * spans must be memory the caller may overwrite before it has looked
     * (GETs' destinations, a PUT's target range, beyond what has
     * arrived) and keeps valid until the poll returns; a datagram that was
     * not the one expected is copied back by the caller
     * (sx_tl_event_t.landed). A transport may land fewer than offered, or
     * none (a read GRO coalesced: it copies the bytes back itself and
     * reports 0). At most SX_TL_LAND_SPANS spans; the offer lasts for one
     * poll call, used or not, also one that fails. Token holder; never blocks. May be NULL:
     * the transport never lands, every datagram arrives whole in data.
     */
    void (*land)(sx_tl_iface_t *iface, size_t head, const struct iovec *spans, unsigned nspans,
                 size_t step);

    /**
     * The file descriptors to sleep on: writes up to SX_TL_WAIT_FDS to
     * fds[] and returns how many (0 if the interface has none); one of
     * them becomes readable when poll may return something. The same fds
     * for the interface's whole life, for poll(2) or epoll. They are the
     * interface's own sockets or queues, never an epoll set over them: a
     * socket that any epoll set watches costs every datagram that arrives
     * a wake-up callback under the set's lock, one more for each level of
     * nesting, and the engine therefore puts them in its sets only while a
     * thread may sleep there (docs/design.md, section 4). Any thread.
     */
    unsigned (*wait_fds)(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS]);

    /**
     * Prepares to sleep on wait_fds (libfabric's fi_trywait): SX_OK when
     * one of them will become readable for anything poll has not reported
     * yet, SX_ERR_AGAIN when poll must run first. Token holder; never
     * blocks. May be NULL: the fds alone are enough.
     */
    int (*arm)(sx_tl_iface_t *iface);
};

/** The part every interface struct starts with. */
struct sx_tl_iface {
    const sx_tl_ops_t *ops;
    bool rx_left; /* written by poll: see its contract; beside ops, read with it */
    sx_tl_caps_t caps;
    sx_tl_stats_t stats;
};

extern const sx_tl_ops_t sx_tl_udp_ops;
extern const sx_tl_ops_t sx_tl_self_ops;
extern const sx_tl_ops_t sx_tl_fault_ops;
extern const sx_tl_ops_t sx_tl_sink_ops;

/** sink: bytes of the answer a config->reflect callback writes. */
#define SX_TL_SINK_ACK_LEN 64
/* Defined only when libfabric was found at build time (SX_HAVE_OFI). */
extern const sx_tl_ops_t sx_tl_ofi_ops;
/* Defined only when libibverbs was found at build time (SX_HAVE_VERBS). */
extern const sx_tl_ops_t sx_tl_verbs_ops;

/** The transport called @p name ("udp", "self", "fault", "ofi") built
 *  into this library, or NULL. */
const sx_tl_ops_t *sx_tl_find(const char *name);

/* ------------------------------------------------------------------ */
/* Selection (registry.c)                                               */

/* Every transport name SX_TRANSPORTS may use, built or not. */
#define SX_TL_KNOWN 5

/** One transport as the engine's selection saw it. */
typedef struct sx_tl_choice {
    const char *name;
    const sx_tl_ops_t *ops; /* NULL: not built into this library */
    int network;            /* 1: reaches other engines; 0: self */
    int allowed;            /* SX_TRANSPORTS lets it run */
    int available;          /* its query succeeded (self: always) */
    int selected;           /* the engine runs it */
    unsigned exclusivity;   /* from the query; 0 when not queried */
    char detail[SX_TL_DETAIL_MAX];
} sx_tl_choice_t;

/**
 * Chooses the network transport: parses @p spec (SX_TRANSPORTS: empty for
 * every transport, "a,b" for those only, "^a,b" for all but those; self is
 * always used for the engine itself and cannot be excluded), queries the
 * allowed network transports and selects the available one with the
 * highest exclusivity. Fills @p choices (SX_TL_KNOWN entries, in the
 * registry's order) and *net_p. SX_ERR_INVALID_PARAM with a log line for a
 * malformed list, an unknown name, a transport this build lacks or a list
 * that leaves no network transport; SX_ERR_NO_DEVICE when none of the
 * allowed ones can run. Any thread; may block as long as the queries.
 */
int sx_tl_select(const char *spec, const sx_tl_config_t *config, sx_tl_choice_t *choices,
                 const sx_tl_ops_t **net_p);

/**
 * self: creates the rendezvous that the self interfaces of one engine share
 * (sx_tl_config_t.self_domain), with room for @p nshards shards. Any thread.
 * SX_ERR_INVALID_PARAM when @p nshards is 0 or above 65536.
 */
int sx_tl_self_domain_create(unsigned nshards, void **domain_p);

/** self: destroys a domain; every interface opened on it must be closed
 *  first. Datagrams still queued are freed. NULL is ignored. */
void sx_tl_self_domain_destroy(void *domain);

/** fault: what the fault decorator did, one count per datagram affected. */
typedef struct sx_tl_fault_stats {
    uint64_t dropped;      /* by loss, ctrl_loss, blackhole or ctrl_blackout */
    uint64_t ctrl_dropped; /* the control datagrams among `dropped` */
    uint64_t duplicated;   /* sent twice (counted when the second copy goes out) */
    uint64_t reordered;    /* held back behind a later datagram */
    uint64_t delayed;      /* held for delay_us */
    uint64_t corrupted;    /* sent with one bit flipped */
    uint64_t ce_marked;    /* received ECN-capable and handed up marked CE (ce) */
    uint64_t stalled;      /* posts that returned stall_us late (one per post) */
} sx_tl_fault_stats_t;

/** fault: copies the fault counters of @p iface to *stats_p; for the owner
 *  of the interface. SX_ERR_INVALID_PARAM if @p iface is not a fault one. */
int sx_tl_fault_stats_get(const sx_tl_iface_t *iface, sx_tl_fault_stats_t *stats_p);

#endif /* SX_TRANSPORTS_TRANSPORT_H */
