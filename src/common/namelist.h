/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Name lists: the comma-separated device names of SX_NET_DEVICES
 * ("mlx5_0,mlx5_1", "eth0"), parsed once by the engine to check them and
 * again by each transport that honours them (udp, verbs). They live here,
 * below the transports, so that both layers read the list the same way.
 *
 * Syntax: names separated by single commas, each 1 to
 * SX_NAMELIST_NAME_MAX - 1 bytes of letters, digits, '_', '-', '.' and
 * ':' (an interface alias such as "eth0:1"); no white space, no empty
 * name, no name twice, at most SX_NAMELIST_MAX names. The empty list
 * means "any device". sx_namelist_parse takes exactly that;
 * sx_namelist_parse_filter, what SX_NET_DEVICES is read with, also takes
 * a leading '^' (the list names what to leave out, as Open MPI's
 * btl_tcp_if_exclude and MCA component lists read it) and IPv4 subnets
 * "a.b.c.d/len" among the names, which only the udp transport gives a
 * meaning (its interfaces with an address there); no device is named so.
 */
#ifndef SX_COMMON_NAMELIST_H
#define SX_COMMON_NAMELIST_H

#include <stdbool.h>
#include <stddef.h>

#define SX_NAMELIST_NAME_MAX 64 /* bytes of one name, with the NUL */
#define SX_NAMELIST_MAX      16 /* names in one list, at most */

/**
 * Parses @p spec (NULL or "" is the empty list) into @p names, at most
 * @p max of them (never more than SX_NAMELIST_MAX), and sets *count_p.
 * SX_OK, or SX_ERR_INVALID_PARAM with why the list is refused written to
 * @p why (at most @p why_len bytes, naming the offending name or
 * character) and nothing else touched. Logs nothing: the caller knows
 * which parameter it parses. Any thread.
 */
int sx_namelist_parse(const char *spec, char (*names)[SX_NAMELIST_NAME_MAX], unsigned max,
                      unsigned *count_p, char *why, size_t why_len);

/**
 * Parses SX_NET_DEVICES (see the top): as sx_namelist_parse, after a
 * leading '^' (*exclude_p says whether there was one), with '/' allowed in
 * a name for subnets. Any thread.
 */
int sx_namelist_parse_filter(const char *spec, char (*names)[SX_NAMELIST_NAME_MAX], unsigned max,
                             unsigned *count_p, bool *exclude_p, char *why, size_t why_len);

/** Index of @p name among the first @p count of @p names, or -1. */
int sx_namelist_find(const char (*names)[SX_NAMELIST_NAME_MAX], unsigned count, const char *name);

#endif /* SX_COMMON_NAMELIST_H */
