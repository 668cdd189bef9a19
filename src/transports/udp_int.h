/*
 * Private to the udp transport: what udp.c (the interface, its card address
 * and its data path) and udp_sock.c (binding, the mtu, creating and sizing
 * the sockets, the connected per-peer send sockets) share. Nothing else
 * includes it; the rest of the library sees udp only through sx_tl_udp_ops
 * (transport.h).
 */
#ifndef SX_TRANSPORTS_UDP_INT_H
#define SX_TRANSPORTS_UDP_INT_H

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "transports/transport.h"

#define UDP_RX_BATCH   32                  /* receive buffers per socket */
#define UDP_CTRL_MAX   256                 /* longest datagram sent or received on the ACK path */
#define UDP_ADDRS_MAX  8                   /* addresses a card offers for one interface */
#define UDP_CAND_MAX   (UDP_ADDRS_MAX + 1) /* a peer's, and loopback on this host */
#define UDP_FILTER_MAX 16                  /* items in an SX_BIND_ADDR filter */

typedef struct udp_dest {
    struct sockaddr_in sa;     /* the peer's data socket */
    struct sockaddr_in ack_sa; /* where control datagrams go: its ACK socket, or sa */
    uint32_t next_free;        /* link in the free list while !live */
    int tx_fd;                 /* a socket connected to sa, or -1: data goes out on u->fd */
    bool live;
    bool has_ack;       /* the peer's address named an ACK port */
    uint8_t ncand, cur; /* the peer's addresses we could use; sa is cand[cur] */
    size_t mtu;         /* the route's, for dest_mtu */
    struct sockaddr_in cand[UDP_CAND_MAX];
} udp_dest_t;

/* One item of an SX_BIND_ADDR filter: an interface name or a subnet. */
typedef struct udp_filter_item {
    char name[IFNAMSIZ];
    struct in_addr net;
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
    struct in_addr ip;
    uint8_t prefix;
    char ifname[IFNAMSIZ];
} udp_laddr_t;

/* A peer's card address, decoded: one address (kind 4, host_key 0) or
 * the list of a wildcard-bound interface (kind 5). */
typedef struct udp_peer_addr {
    uint64_t host_key;
    uint16_t port, ack_port; /* host order; ack_port 0: none */
    unsigned n;
    struct in_addr ip[UDP_ADDRS_MAX];
    uint8_t prefix[UDP_ADDRS_MAX];
} udp_peer_addr_t;

/* Room for the SO_RXQ_OVFL and UDP_GRO control messages, aligned for
 * struct cmsghdr. */
typedef union udp_ctrl {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(uint32_t)) + CMSG_SPACE(sizeof(int))];
} udp_ctrl_t;

/* One socket's receive side: UDP_RX_BATCH buffers of buflen bytes; the
 * events of one poll point into them until the next poll. */
typedef struct udp_rx {
    int fd;
    size_t buflen;
    size_t limit; /* the longest datagram handed up: buflen, or the mtu under GRO */
    uint8_t *mem;
    struct mmsghdr msgs[UDP_RX_BATCH];
    struct iovec iov[UDP_RX_BATCH];
    udp_ctrl_t ctrl[UDP_RX_BATCH];
    uint32_t last_ovfl; /* the socket's drop counter as last reported */
    bool batch;         /* the last poll found datagrams back to back: use recvmmsg */
    /* What the last read left to hand up: buffers pend_i..pend_n-1 (a
     * buffer that GRO filled with several datagrams can hold more than a
     * poll's room), from offset pend_off in buffer pend_i; seg[i] is the
     * datagram size in buffer i (UDP_GRO), 0 for one datagram. */
    unsigned pend_i, pend_n;
    size_t pend_off;
    uint32_t seg[UDP_RX_BATCH];
} udp_rx_t;

typedef struct udp_iface {
    sx_tl_iface_t base;
    int fd;
    struct sockaddr_in local;

    /* Bound to the wildcard address: the card offers laddrs and the host
     * key (udp_addrs.c); otherwise local's address alone. */
    bool wildcard;
    uint64_t host_key;
    udp_laddr_t laddrs[UDP_ADDRS_MAX];
    unsigned nladdrs;
    int (*is_control)(const void *data, size_t len);

    /* The ACK socket, -1 when off; ep_fd is the epoll fd over both
     * sockets that wait_fd returns then (-1 when off). */
    int ack_fd;
    int ep_fd;
    uint16_t ack_port; /* host order */

    /* UDP GSO on send (UDP_SEGMENT: a run of equal datagrams to one
     * destination in one message, cut by the kernel) and GRO on the data
     * socket's receive side (UDP_GRO); false where the kernel lacks them.
     * bench/gso_bench.c has why (docs/tuning.md, "UDP GSO and GRO"). */
    bool gso;
    bool gro;

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
int sx_udp_socket_open(const char *what, const struct sockaddr_in *sa, size_t rcvbuf, size_t sndbuf,
                       int *fd_p, struct sockaddr_in *bound_p);

/** Gives @p rx its socket and UDP_RX_BATCH buffers of @p buflen bytes. */
int sx_udp_rx_init(udp_rx_t *rx, int fd, size_t buflen);

/** Opens the ACK socket and the epoll fd over both sockets. */
int sx_udp_open_ack(udp_iface_t *u, const sx_tl_config_t *config);

/** The calling thread's network namespace; zeros when unknown. */
void sx_udp_netns(dev_t *dev_p, ino_t *ino_p);

/** How many connected send sockets an interface may open. */
unsigned sx_udp_connect_budget(const sx_tl_config_t *config);

/** Gives destination @p d a connected send socket of its own, if it can;
 *  else it keeps the shared data socket. Token holder. */
void sx_udp_connect_dest(udp_iface_t *u, udp_dest_t *d);

/* ----------------------------------------------------------- udp_addrs.c */

/** Whether SX_BIND_ADDR text is one address ("a.b.c.d[:port]") rather
 *  than a filter. */
bool sx_udp_bind_is_single(const char *text);

/** Parses a filter (udp_addrs.c, top); SX_ERR_INVALID_PARAM with why. */
int sx_udp_filter_parse(const char *text, udp_filter_t *f, char *why, size_t cap);

/** Whether the filter lets address @p ip of interface @p ifname be used. */
bool sx_udp_filter_allows(const udp_filter_t *f, const char *ifname, struct in_addr ip);

/** The IPv4 addresses of the up, non-loopback interfaces that @p f
 *  allows, at most @p max; SX_ERR_NO_DEVICE, logged, when the
 *  interfaces cannot be listed. */
int sx_udp_scan_local(const udp_filter_t *f, udp_laddr_t *out, unsigned max, unsigned *n_p);

/** A key equal for two engines exactly when they share a boot and a
 *  network namespace (loopback reaches from one to the other); never 0. */
uint64_t sx_udp_host_key(dev_t netns_dev, ino_t netns_ino);

/** Whether @p ip lies in the subnet of one of @p mine. */
bool sx_udp_same_subnet(const udp_laddr_t *mine, unsigned n, struct in_addr ip);

/** The peer's addresses this interface could send to, best first (see
 *  udp_addrs.c); how many. */
unsigned sx_udp_candidates(const udp_iface_t *u, const udp_peer_addr_t *pa,
                           struct sockaddr_in *cand, unsigned max);

/** The largest payload on the route to @p sa (IP_MTU), at most caps.mtu;
 *  @p connected_fd: a socket already connected there, or -1. */
size_t sx_udp_route_mtu(udp_iface_t *u, const struct sockaddr_in *sa, int connected_fd);

/** "eth0 10.1.0.1/24, eth1 10.2.0.1/24", or "none". */
void sx_udp_laddrs_str(const udp_laddr_t *a, unsigned n, char *buf, size_t cap);

#endif /* SX_TRANSPORTS_UDP_INT_H */
