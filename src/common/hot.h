/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SX_HOT marks the functions a message passes through on its way in and
 * out (the progress pass, the send path, the udp transport's reads and
 * writes, the timers they arm), so that the linker puts them next to each
 * other (.text.hot, which GNU ld and lld place together) instead of
 * wherever their files fall.
 *
 * Why it matters: a kernel with page-table isolation and no PCID (this
 * project's VMs: `pti` without `pcid` in /proc/cpuinfo) flushes the TLB
 * at every system call, so a progress pass pays one TLB miss for every
 * page of code it touches between two of them. The functions of an 8-byte
 * ping-pong were 36 KB over 22 pages of sx_bench's text, 10 when packed.
 * Only the section changes: no optimisation level, no inlining.
 */
#ifndef SX_COMMON_HOT_H
#define SX_COMMON_HOT_H

#if defined(__GNUC__)
#define SX_HOT __attribute__((section(".text.hot.shardx")))
#else
#define SX_HOT
#endif

#endif
