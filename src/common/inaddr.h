/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * IPv4 address classes that the transports and the connection methods
 * test, in one place. Loopback is all of 127.0.0.0/8 (RFC 1122 section
 * 3.2.1.3), not 127.0.0.1 alone; udp's source check is the exception,
 * which accepts 127.0.0.1 itself from a peer on this host and no other
 * address of 127/8 (udp_src_matches). IPv6 has IN6_IS_ADDR_LOOPBACK.
 */
#ifndef SX_COMMON_INADDR_H
#define SX_COMMON_INADDR_H

#include <netinet/in.h>
#include <stdbool.h>

/* Whether @p a (network byte order) is an IPv4 loopback address. */
static inline bool sx_in4_loopback(struct in_addr a)
{
    return (ntohl(a.s_addr) >> IN_CLASSA_NSHIFT) == IN_LOOPBACKNET;
}

#endif
