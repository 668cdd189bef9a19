/*
 * Private to the udp transport: what udp.c (the interface, its card address
 * and its data path) and udp_sock.c (binding, the mtu, creating and sizing
 * the sockets, the connected per-peer send sockets) share. Nothing else
 * includes it; the rest of the library sees udp only through sx_tl_udp_ops
 * (transport.h).
 */
#ifndef SX_TRANSPORTS_UDP_INT_H
#define SX_TRANSPORTS_UDP_INT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "transports/transport.h"

#define UDP_RX_BATCH 32  /* receive buffers per socket */
#define UDP_CTRL_MAX 256 /* longest datagram sent or received on the ACK path */

typedef struct udp_dest {
    struct sockaddr_in sa;     /* the peer's data socket */
    struct sockaddr_in ack_sa; /* where control datagrams go: its ACK socket, or sa */
    uint32_t next_free;        /* link in the free list while !live */
    int tx_fd;                 /* a socket connected to sa, or -1: data goes out on u->fd */
    bool live;
    bool has_ack; /* the peer's address named an ACK port */
} udp_dest_t;

/* Room for the SO_RXQ_OVFL control message, aligned for struct cmsghdr. */
typedef union udp_ctrl {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(uint32_t))];
} udp_ctrl_t;

/* One socket's receive side: UDP_RX_BATCH buffers of buflen bytes; the
 * events of one poll point into them until the next poll. */
typedef struct udp_rx {
    int fd;
    size_t buflen;
    uint8_t *mem;
    struct mmsghdr msgs[UDP_RX_BATCH];
    struct iovec iov[UDP_RX_BATCH];
    udp_ctrl_t ctrl[UDP_RX_BATCH];
    uint32_t last_ovfl; /* the socket's drop counter as last reported */
    bool batch;         /* the last poll found datagrams back to back: use recvmmsg */
} udp_rx_t;

typedef struct udp_iface {
    sx_tl_iface_t base;
    int fd;
    struct sockaddr_in local;
    int (*is_control)(const void *data, size_t len);

    /* The ACK socket, -1 when off; ep_fd is the epoll fd over both
     * sockets that wait_fd returns then (-1 when off). */
    int ack_fd;
    int ep_fd;
    uint16_t ack_port; /* host order */

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

#endif /* SX_TRANSPORTS_UDP_INT_H */
