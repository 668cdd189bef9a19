/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to the udp transport: what udp.c (the interface and its data
 * path), udp_card.c (its card address), udp_addrs.c (which addresses are
 * offered and chosen) and udp_sock.c (binding, the mtu, creating and
 * sizing the sockets, the connected per-peer send sockets) share. Nothing else
 * includes it; the rest of the library sees udp only through sx_tl_udp_ops
 * (transport.h).
 */
#ifndef SX_TRANSPORTS_UDP_INT_H
#define SX_TRANSPORTS_UDP_INT_H

#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>
#include <sys/uio.h>

#include "common/syscall.h"
#include "transports/transport.h"

#define UDP_RX_BATCH        32   /* receive buffers per socket */
#define UDP_PAGE            4096 /* where receive buffers start (sx_udp_rx_init) */
#define UDP_RX_BUSY_READ    8    /* datagrams in one read that make a socket busy */
#define UDP_REFUSED_RETRIES 16   /* ECONNREFUSED reports skipped per call */
#ifndef UDP_GRO
#define UDP_GRO 104 /* linux/udp.h, Linux 5.0 */
#endif
#define UDP_V6_QUIET_POLLS  256u      /* udp_poll: an unused IPv6 socket, every 256th */
#define UDP_HOT_RUN         32u       /* small datagrams in a row to one destination: hot */
#define UDP_HOT_IDLE        1024u     /* reads without a datagram that make a socket quiet */
#define UDP_HOT_QUIET_POLLS 16u       /* a socket newly quiet: read every 16th poll, */
#define UDP_HOT_QUIET_STEP  64u       /* half as often after each 64 quiet reads, */
#define UDP_HOT_QUIET_MAX   128u      /* down to every 128th poll (udp_hot_quiet_every) */
#define UDP_HOT_SETTLE_NS   10000000u /* after a connect, addresses are read for 10 ms */
#define UDP_CTRL_MAX        256       /* longest datagram sent or received on the ACK path */
#define UDP_ADDRS_MAX       8         /* addresses a card offers for one interface */
#define UDP_CAND_MAX        (UDP_ADDRS_MAX + 1) /* a peer's, and loopback on this host */
#define UDP_FILTER_MAX      16                  /* items in an SX_BIND_ADDR filter */

/* An IPv4 or IPv6 socket address: sa.sa_family says which. */
typedef union udp_sa {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
} udp_sa_t;

static inline socklen_t udp_sa_len(const udp_sa_t *a)
{
    return a->sa.sa_family == AF_INET6 ? (socklen_t)sizeof(a->in6) : (socklen_t)sizeof(a->in4);
}

typedef struct udp_dest {
    udp_sa_t sa;        /* the peer's data socket */
    udp_sa_t ack_sa;    /* where control datagrams go: its ACK socket, or sa */
    uint32_t next_free; /* link in the free list while !live */
    int tx_fd;          /* a socket connected to sa, or -1: data goes out on u->fd */
    bool live;
    bool has_ack;       /* the peer's address named an ACK port ... */
    uint16_t ack_port;  /* ... this one (host order) */
    uint8_t ncand, cur; /* the peer's addresses we could use; sa is cand[cur] */
    size_t mtu;         /* the route's, for dest_mtu */
    udp_sa_t cand[UDP_CAND_MAX];
} udp_dest_t;

/* An IPv4 or IPv6 address; IPv4 kept in the low four bytes' place of
 * v4 (network order), family says which. */
typedef struct udp_ip {
    sa_family_t family;
    struct in_addr v4;
    struct in6_addr v6;
} udp_ip_t;

/* One item of an SX_BIND_ADDR filter: an interface name or a subnet. */
typedef struct udp_filter_item {
    char name[IFNAMSIZ];
    udp_ip_t net;
    uint8_t prefix;
    bool is_net;
} udp_filter_item_t;

typedef struct udp_filter {
    udp_filter_item_t item[UDP_FILTER_MAX];
    unsigned n; /* 0: everything */
    bool exclude;
} udp_filter_t;

/* One address this interface offers. */
typedef struct udp_laddr {
    udp_ip_t ip;
    uint8_t prefix;
    char ifname[IFNAMSIZ];
} udp_laddr_t;

/* A peer's card address, decoded: one address (kind 4, host_key 0) or
 * the list of a wildcard-bound interface (kind 5: IPv4; kind 6: IPv4 and
 * IPv6). */
typedef struct udp_peer_addr {
    uint64_t host_key;
    uint16_t port, ack_port; /* host order; ack_port 0: none */
    unsigned n;
    udp_ip_t ip[UDP_ADDRS_MAX];
    uint8_t prefix[UDP_ADDRS_MAX];
} udp_peer_addr_t;

/* Room for the SO_RXQ_OVFL, UDP_GRO and IP_TOS (or IPV6_TCLASS, an int)
 * control messages, aligned for struct cmsghdr. */
typedef union udp_ctrl {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(uint32_t)) + CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(int))];
} udp_ctrl_t;

/* A socket's arrays for batch reads (recvmmsg), and for the datagrams
 * they return; they follow its buffers in one allocation
 * (sx_udp_rx_init). seg[i] is the datagram size in buffer i (UDP_GRO), 0
 * for one datagram; the landings the last read gave buffers 0..land_n-1
 * (sx_tl_ops_t.land): bytes land_head .. land_head + land_cap[i] of
 * buffer i's datagram went to land_dst[i], the rest to the buffer around
 * a gap of that size; land_iov[i] is its scatter list for that read. */
typedef struct udp_rx_bufs {
    uint32_t seg[UDP_RX_BATCH];
    uint8_t ecn[UDP_RX_BATCH]; /* buffer i's ECN field (GRO coalesces equal ones only) */
    size_t land_cap[UDP_RX_BATCH];
    uint8_t *land_dst[UDP_RX_BATCH];
    struct iovec iov[UDP_RX_BATCH];
    udp_sa_t src[UDP_RX_BATCH]; /* each datagram's sender (src_matches) */
    struct mmsghdr msgs[UDP_RX_BATCH];
    udp_ctrl_t ctrl[UDP_RX_BATCH];
    struct iovec land_iov[UDP_RX_BATCH][3];
} udp_rx_bufs_t;

/* One socket's receive side: UDP_RX_BATCH buffers of buflen bytes; the
 * events of one poll point into them until the next poll. */
typedef struct udp_rx {
    /* What a read of one datagram touches, alone (udp_rx_lone): every
     * socket's lies on the interface's first page, the arrays of batch
     * reads (b) elsewhere (src/common/hot.h says why pages count). */
    int fd;
    size_t buflen;
    size_t limit;       /* the longest datagram handed up: buflen, or the mtu under GRO */
    uint8_t *mem;       /* buffer 0; buffer i at mem + i * stride (sx_udp_rx_init) */
    uint32_t last_ovfl; /* the socket's drop counter as last reported */
    bool batch;         /* the last poll found datagrams back to back: use recvmmsg */
    bool left;          /* the last poll may have left datagrams (transport.h, rx_left) */
    /* busy: a read found UDP_RX_BUSY_READ datagrams queued behind each
     * other once, and the options a busy socket needs are on: SO_RXQ_OVFL,
     * and UDP_GRO when gro (a data socket on a kernel that has it).
     * sx_udp_rx_busy says why they wait for that. */
    bool busy, gro;
    /* cmsg: the socket was asked for control data (SO_RXQ_OVFL when busy,
     * the ECN field once udp_ecn_report ran), so a lone datagram is read
     * with recvmsg; until then with recvfrom (udp_rx_lone says why). */
    bool cmsg;
    /* connected: the socket sends connected (the hot socket), so the
     * kernel reports ICMP errors of datagrams sent through it on its reads
     * too (udp(7)); udp_rx_again skips those as the send path does. */
    bool connected;
    /* vouched: the socket is connected to this address and settled
     * (udp_hot.c), so the kernel delivers it nothing from anywhere else: a
     * lone datagram read with recvfrom (udp_rx_lone) is read without its
     * sender's address, which is copied from here. NULL: addresses are
     * read. */
    const udp_sa_t *vouched;
    unsigned dirty; /* b->msgs[0..dirty) the last read may have written back */
    /* What the last read left to hand up: buffers pend_i..pend_n-1 (a
     * buffer that GRO filled with several datagrams can hold more than a
     * poll's room), from offset pend_off in buffer pend_i. */
    unsigned pend_i, pend_n;
    size_t pend_off;
    unsigned land_n;   /* buffers the last read offered landings (b->land_cap) */
    size_t land_head;  /* where in each of them the landing began */
    udp_sa_t lone_src; /* the sender of the datagram a lone read returned */
    udp_rx_bufs_t *b;
} udp_rx_t;

typedef struct udp_iface {
    sx_tl_iface_t base;
    int fd;
    struct sockaddr_in local;
    /* Bound to the wildcard address and offering IPv6 addresses: an IPv6
     * socket (IPV6_V6ONLY) on the same port, for IPv6 peers; -1 when
     * none. IPv4 stays on fd, so that a host without IPv6 runs as it
     * did. */
    int fd6;
    /* Until a datagram first comes to fd6, poll reads it only every
     * UDP_V6_QUIET_POLLS calls (udp_poll); from then on at every call. */
    bool v6_seen;
    unsigned v6_polls;

    /* Bound to the wildcard address: the card offers laddrs and the host
     * key (udp_addrs.c); otherwise local's address alone. */
    bool wildcard;
    uint64_t host_key;
    udp_laddr_t laddrs[UDP_ADDRS_MAX];
    unsigned nladdrs;
    int (*is_control)(const void *data, size_t len);

    /* The ACK socket, -1 when off. */
    int ack_fd;
    uint16_t ack_port; /* host order */

    /* UDP GSO on send (UDP_SEGMENT: a run of equal datagrams to one
     * destination in one message, cut by the kernel) and GRO on the data
     * sockets' receive side (UDP_GRO, turned on at a socket's first
     * backlog: sx_udp_rx_busy); false where the kernel lacks them.
     * bench/gso_bench.c has why (docs/tuning.md, "UDP GSO and GRO"). */
    bool gso;
    bool gro;
    bool ecn;        /* sx_tl_config_t.ecn: data sockets mark ECT(0) ... */
    bool ecn_report; /* ... and since ecn_report, report the field */
    /* Landings offered for the next poll's data read (land); land_n 0:
     * none. */
    size_t land_head, land_step;
    unsigned land_n;
    struct iovec land_spans[SX_TL_LAND_SPANS];

    /* Connected send sockets: destinations that have one, and how many
     * may (config->udp_connect); sndbuf is what each asks for. */
    unsigned connected;
    unsigned connect_max;
    size_t sndbuf;
    dev_t netns_dev; /* the network namespace the data socket was made in */
    ino_t netns_ino;

    /* Destination table: slots are reused through a free list. */
    udp_dest_t *dests;
    uint32_t ndests; /* slots in use or free, below cap */
    uint32_t cap;
    uint32_t free_head;

    udp_rx_t rx;     /* the data socket */
    udp_rx_t ack_rx; /* the ACK socket, when there is one */
    udp_rx_t rx6;    /* the IPv6 data socket, when there is one */

    /* The hot socket (udp_hot.c, udp_sock.c), -1 when off: on the data
     * socket's address and port, connected to itself at first, then to the
     * data socket of hot_conn, the destination of the last run of about
     * UDP_HOT_RUN small datagrams sent in a row (run_dest, run_n; a batch
     * cut short counts its last datagram twice), while it lives. hot_dest:
     * the destination whose small datagrams leave through it (hot_conn, or
     * SX_TL_DEST_NONE after a large one). hot_sa: the address it is
     * connected to; its reads take no sender address from hot_settle_ns
     * on (UINT64_MAX: not connected to a destination now). Each socket is
     * read at every poll while it has had a datagram in its last
     * UDP_HOT_IDLE reads (the idle counts), else every
     * udp_hot_quiet_every(idle)-th poll (polls, udp_hot.c) and after arm
     * (hot_all). Token holder, as the rest of the interface. */
    int hot_fd;
    bool hot_all;
    sx_tl_dest_t hot_dest, hot_conn, run_dest;
    udp_sa_t hot_sa;
    uint64_t hot_settle_ns;
    unsigned run_n, polls, hot_idle, data_idle;
    udp_rx_t hot_rx;

    struct udp_tx_batch *txb; /* a full send batch's arrays (udp.c, udp_tx_arrays_t) */
} udp_iface_t;

/* ------------------------------------------------------------ udp_sock.c */

/** Parses SX_BIND_ADDR ("a.b.c.d" or "a.b.c.d:port") into @p sa; logs why
 *  it is refused. */
int sx_udp_parse_bind(const char *text, struct sockaddr_in *sa);

/** The mtu for a socket bound to @p local (see udp_sock.c, "MTU"). */
size_t sx_udp_pick_mtu(int fd, const struct sockaddr_in *local);

/** The interfaces SX_NET_DEVICES names that have an IPv4 address, in its
 *  order: how many (at most @p max, names in @p names, a description in
 *  @p text), or a negative status with why in @p text. */
int sx_udp_scan_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max,
                        char *text, size_t text_len, bool warn);

/** The IPv4 address of interface @p name for a shard's socket; logged on
 *  failure. */
int sx_udp_device_addr(const char *name, unsigned shard, struct sockaddr_in *sa);

/** Creates, sizes and binds one nonblocking socket; *fd_p may hold a
 *  socket for the caller to close even on failure. */
int sx_udp_socket_open(const char *what, const udp_sa_t *sa, size_t rcvbuf, size_t sndbuf,
                       int *fd_p, udp_sa_t *bound_p);

/** Gives @p rx its socket and UDP_RX_BATCH buffers of @p buflen bytes. */
int sx_udp_rx_init(udp_rx_t *rx, int fd, size_t buflen);

/* Reads up to @p max datagrams from one of @p u's sockets (@p rx) into
 * @p events, scattered around u's landings when it offers some; returns
 * how many, or SX_ERR_IO (udp_rx.c). */
int sx_udp_rx_poll(udp_iface_t *u, udp_rx_t *rx, sx_tl_event_t *events, unsigned max);

/* Turns on what a socket with a backlog needs (SO_RXQ_OVFL; UDP_GRO when
 * rx->gro), once (udp_rx.c says why it waits for the backlog). */
void sx_udp_rx_busy(udp_rx_t *rx);

/*
 * The data path's socket calls: the count, or the negated errno (errno
 * itself is not set). They go straight to the kernel (common/syscall.h)
 * rather than through glibc's wrappers of the same name, which are
 * cancellation points (pthreads(7)): each call switches asynchronous
 * cancellation on and off around the system call, 42 instructions of the
 * 947 an empty progress pass spent in user space (callgrind of a loop of
 * sx_progress calls), and a thread cancelled inside one would die holding
 * its shard's token, which no other thread could then take. A progress
 * call is not a place to be cancelled. Under ASan and TSan the wrappers
 * stay: the sanitizers intercept them, check the buffers and see the
 * kernel write into them.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SX_UDP_WRAPPED_CALLS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SX_UDP_WRAPPED_CALLS 1
#endif
#endif

static inline ssize_t sx_udp_recvmsg(int fd, struct msghdr *msg, int flags)
{
#ifdef SX_UDP_WRAPPED_CALLS
    ssize_t n = recvmsg(fd, msg, flags);
    return n < 0 ? -(ssize_t)errno : n;
#else
    return (ssize_t)sx_syscall5(SYS_recvmsg, fd, (long)msg, flags, 0, 0);
#endif
}

/* One datagram into one buffer, with its sender and no control data;
 * the caller passes MSG_TRUNC so that a longer datagram's real length
 * comes back (udp(7): recv's MSG_TRUNC, UDP since Linux 3.4). */
static inline ssize_t sx_udp_recvfrom(int fd, void *buf, size_t len, int flags,
                                      struct sockaddr *src, socklen_t *src_len)
{
#ifdef SX_UDP_WRAPPED_CALLS
    ssize_t n = recvfrom(fd, buf, len, flags, src, src_len);
    return n < 0 ? -(ssize_t)errno : n;
#else
    return (ssize_t)sx_syscall6(SYS_recvfrom, fd, (long)buf, (long)len, flags, (long)src,
                                (long)src_len);
#endif
}

static inline int sx_udp_recvmmsg(int fd, struct mmsghdr *msgs, unsigned n, int flags)
{
#ifdef SX_UDP_WRAPPED_CALLS
    int got = recvmmsg(fd, msgs, n, flags, NULL);
    return got < 0 ? -errno : got;
#else
    return (int)sx_syscall5(SYS_recvmmsg, fd, (long)msgs, n, flags, 0);
#endif
}

static inline int sx_udp_sendmmsg(int fd, struct mmsghdr *msgs, unsigned n, int flags)
{
#ifdef SX_UDP_WRAPPED_CALLS
    int sent = sendmmsg(fd, msgs, n, flags);
    return sent < 0 ? -errno : sent;
#else
    return (int)sx_syscall5(SYS_sendmmsg, fd, (long)msgs, n, flags, 0);
#endif
}

/*
 * One datagram: sendto(2) when it is one piece without control data (the
 * address, if any, is the message's), sendmsg(2) otherwise; 1 when the
 * kernel took it, else the negated errno. A sendmmsg of one message costs
 * the kernel more than this (it copies the mmsghdr and the iovec array in
 * and the length back out): in sx_bench latency's 8-byte ping-pong,
 * sendmmsg took 6,760-7,180 TSC cycles against the raw-UDP floor's send's
 * 6,470-6,700 in the same runs, sendto 6,850-6,970 against 6,550-6,740
 * (rdtsc around each call, medians of 22,000; docs/tuning.md, "Where a
 * small message's time goes").
 */
static inline int sx_udp_send1(int fd, const struct msghdr *h, int flags)
{
    if (h->msg_iovlen == 1 && h->msg_controllen == 0) {
#ifdef SX_UDP_WRAPPED_CALLS
        ssize_t n = sendto(fd, h->msg_iov[0].iov_base, h->msg_iov[0].iov_len, flags,
                           (const struct sockaddr *)h->msg_name, h->msg_namelen);
        return n < 0 ? -errno : 1;
#else
        long n =
            sx_syscall6(SYS_sendto, fd, (long)h->msg_iov[0].iov_base, (long)h->msg_iov[0].iov_len,
                        flags, (long)h->msg_name, (long)h->msg_namelen);
        return n < 0 ? (int)n : 1;
#endif
    }
#ifdef SX_UDP_WRAPPED_CALLS
    ssize_t n = sendmsg(fd, h, flags);
    return n < 0 ? -errno : 1;
#else
    long n = sx_syscall5(SYS_sendmsg, fd, (long)h, flags, 0, 0);
    return n < 0 ? (int)n : 1;
#endif
}

/* Whether a failed send or receive only found no room (or nothing to
 * read): worth trying again later, never an error of the datagram's. */
static inline bool sx_udp_errno_no_room(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS || err == ENOMEM;
}

/* Whether @p err is one the kernel reports on a connected UDP socket for
 * an ICMP error about an earlier datagram (icmp_err_convert in
 * net/ipv4/icmp.c; udp(7), ERROR HANDLING). */
static inline bool sx_udp_errno_icmp(int err)
{
    switch (err) {
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENONET:
    case ENOPROTOOPT:
    case EOPNOTSUPP:
    case EACCES:
    case EPROTO:
    case EMSGSIZE:
        return true;
    default:
        return false;
    }
}

/* Whether a failed read found the socket empty. */
static inline bool sx_udp_errno_empty(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK;
}
/** ECN on a data socket (udp_sock.c): it sends ECT(0) (open), and its
 *  reads report each datagram's field (recv). False, with a warning, when
 *  the kernel refuses. */
bool sx_udp_ecn_open(int fd, int family);
bool sx_udp_ecn_recv(int fd, int family);

/** Opens the ACK socket. */
int sx_udp_open_ack(udp_iface_t *u, const sx_tl_config_t *config);

/** Opens the hot socket on the data socket's address and port; SX_OK
 *  or why not, logged (the interface then runs without). */
int sx_udp_open_hot(udp_iface_t *u, const sx_tl_config_t *config);

/** Opens the IPv6 data socket on the data socket's port. */
int sx_udp_open_v6(udp_iface_t *u, const sx_tl_config_t *config);

/** The calling thread's network namespace; zeros when unknown. */
void sx_udp_netns(dev_t *dev_p, ino_t *ino_p);

/** How many connected send sockets an interface may open. */
unsigned sx_udp_connect_budget(const sx_tl_config_t *config);

/** Gives destination @p d a connected send socket of its own, if it can;
 *  else it keeps the shared data socket. Token holder. */
void sx_udp_connect_dest(udp_iface_t *u, udp_dest_t *d);

/* ------------------------------------------------------------- udp_hot.c */

/** Connects the hot socket to @p dest (udp_hot.c, the top says why). */
void sx_udp_hot_connect(udp_iface_t *u, sx_tl_dest_t dest);

/** Reads the data and hot sockets as their activity says; rx_left from
 *  them (udp_hot.c). */
int sx_udp_hot_poll(udp_iface_t *u, sx_tl_event_t *events, unsigned max);

/* Counts the small datagrams (@p len bytes, at most half the route's mtu)
 * sent in runs by destination (IPv4 only: the hot socket is IPv4); a run
 * of UDP_HOT_RUN makes its destination hot, a large datagram ends the run
 * and takes the hot socket from its destination (udp_hot.c says why). On
 * every datagram sent while the interface has a hot socket. */
static inline void sx_udp_hot_track(udp_iface_t *u, sx_tl_dest_t dest, const udp_dest_t *d,
                                    size_t len)
{
    if (len > d->mtu / 2) {
        u->run_dest = SX_TL_DEST_NONE;
        if (u->hot_dest == dest)
            u->hot_dest = SX_TL_DEST_NONE;
        return;
    }
    if (dest != u->run_dest) {
        u->run_dest = dest;
        u->run_n = 1;
        return;
    }
    if (++u->run_n != UDP_HOT_RUN || dest == u->hot_dest || d->sa.sa.sa_family != AF_INET)
        return;
    if (dest == u->hot_conn)
        u->hot_dest = dest; /* still connected there */
    else
        sx_udp_hot_connect(u, dest);
}

/* A destination removed or moved to another address stops being hot. */
static inline void sx_udp_hot_forget(udp_iface_t *u, sx_tl_dest_t dest)
{
    if (u->hot_conn == dest)
        u->hot_dest = u->hot_conn = SX_TL_DEST_NONE;
    if (u->run_dest == dest)
        u->run_dest = SX_TL_DEST_NONE;
}

/* ------------------------------------------------------------ udp_card.c */

/** Writes @p u's card address (udp_card.c has the layouts); at most
 *  *len_p bytes, SX_ERR_TRUNCATED when they do not fit. */
int sx_udp_card_write(const udp_iface_t *u, void *buf, size_t *len_p);

/** Decodes and checks card bytes into @p pa: NULL when they are a valid
 *  address, else why not, for a message. */
const char *sx_udp_card_decode(const void *addr, size_t len, udp_peer_addr_t *pa);

/** "udp a.b.c.d:port", "udp port P on host K: a.b.c.d/len ...", or why
 *  the bytes are malformed. */
void sx_udp_card_str(const void *addr, size_t len, char *buf, size_t cap);

/** Bytes of a list address with @p n4 IPv4 and @p n6 IPv6 addresses. */
size_t sx_udp_card_list_len(unsigned n4, unsigned n6);

/* ----------------------------------------------------------- udp_addrs.c */

/** Whether SX_BIND_ADDR text is one address ("a.b.c.d[:port]") rather
 *  than a filter. */
bool sx_udp_bind_is_single(const char *text);

/** Parses a filter (udp_addrs.c, top); SX_ERR_INVALID_PARAM with why. */
int sx_udp_filter_parse(const char *text, udp_filter_t *f, char *why, size_t cap);

/** Whether the filter lets address @p ip of interface @p ifname be used. */
bool sx_udp_filter_allows(const udp_filter_t *f, const char *ifname, const udp_ip_t *ip);

/** The IPv4 and global IPv6 addresses of the up, non-loopback interfaces
 *  that @p f allows (IPv4 first), at most @p max; SX_ERR_NO_DEVICE,
 *  logged, when the interfaces cannot be listed. */
int sx_udp_scan_local(const udp_filter_t *f, udp_laddr_t *out, unsigned max, unsigned *n_p);

/** A key equal for two engines exactly when they share a boot and a
 *  network namespace (loopback reaches from one to the other); never 0. */
uint64_t sx_udp_host_key(dev_t netns_dev, ino_t netns_ino);

/** Whether @p ip lies in the subnet of one of @p mine. */
bool sx_udp_same_subnet(const udp_laddr_t *mine, unsigned n, const udp_ip_t *ip);

/** The peer's addresses this interface could send to, best first (see
 *  udp_addrs.c); how many. */
unsigned sx_udp_candidates(const udp_iface_t *u, const udp_peer_addr_t *pa, udp_sa_t *cand,
                           unsigned max);

/** The largest payload on the route to @p sa (IP_MTU, IPV6_MTU), at most
 *  caps.mtu; @p connected_fd: a socket already connected there, or -1. */
size_t sx_udp_route_mtu(udp_iface_t *u, const udp_sa_t *sa, int connected_fd);

/** "a.b.c.d" or "x:y::z" into @p buf. */
void sx_udp_ip_str(const udp_ip_t *ip, char *buf, size_t cap);

/** "udp a.b.c.d:port" or "udp [x:y::z]:port". */
void sx_udp_sa_str(const udp_sa_t *sa, char *buf, size_t cap);

/** "eth0 10.1.0.1/24, eth1 fd00::1/64", or "none". */
void sx_udp_laddrs_str(const udp_laddr_t *a, unsigned n, char *buf, size_t cap);

#endif /* SX_TRANSPORTS_UDP_INT_H */
