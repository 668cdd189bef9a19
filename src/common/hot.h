/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SX_HOT marks the functions a message passes through on its way in and
 * out (the progress pass, the send path, the udp transport's reads and
 * writes, the timers they arm), and SX_HOT_PASS those of them that every
 * progress pass runs, also one that finds nothing, so that the linker puts
 * them next to each other instead of wherever their files fall: the
 * pass's first, then the rest. GNU ld sorts sections named .text.sorted.*
 * by name (its default script, since binutils 2.34) and places them after
 * .text.hot; a linker that does not still keeps each file's together.
 *
 * Why it matters: a kernel with page-table isolation and no PCID flushes
 * the TLB at every system call, so a progress pass pays one TLB miss for
 * every page of code it touches between two of them. The functions of an
 * 8-byte ping-pong were 36 KB over 22 pages of sx_bench's text, 10 when
 * packed; an empty pass ran code on 7 of those 10 before its own
 * functions were put first. Only the section changes: no optimisation
 * level, no inlining.
 *
 * Whether a system call flushes the TLB is the machine's to say, not
 * /proc/cpuinfo's: this project's VM shows `pti` without `pcid`, yet on
 * 2026-12-03 (kernel 6.18 under a PVM hypervisor) 32 dependent loads on
 * 32 pages took 2-3 cycles a page more right after a recv(2) than with
 * no system call before them, against ~15 a page with the TLB cold
 * (docs/tuning.md, "Where a small message's time goes"). There the pages
 * that this file, and the comments citing it, count cost nothing
 * measurable; the packing stays for the kernels that do flush.
 */
#ifndef SX_COMMON_HOT_H
#define SX_COMMON_HOT_H

#if defined(__GNUC__)
#define SX_HOT_PASS __attribute__((section(".text.sorted.shardx.0pass")))
#define SX_HOT      __attribute__((section(".text.sorted.shardx.1message")))
#else
#define SX_HOT_PASS
#define SX_HOT
#endif

#endif
