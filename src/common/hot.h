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

#include "build_config.h"

#if defined(__GNUC__)
#define SX_HOT_PASS __attribute__((section(".text.sorted.shardx.0pass")))
#define SX_HOT      __attribute__((section(".text.sorted.shardx.1message")))
#else
#define SX_HOT_PASS
#define SX_HOT
#endif

/*
 * SX_RET_AFTER_SYSCALL marks the functions between sx_progress and its
 * poll's system call: their returns come right after that call, every
 * pass, to callers that called them before it. Such a function returns
 * through an indirect jump (pop the address, jump to it) instead of ret.
 *
 * Why: a CPU predicts a ret from its return stack buffer, and the way
 * back from a system call here leaves that buffer holding none of the
 * caller's addresses, so every ret to a frame older than the call
 * mispredicts. Refilling it with harmless entries on a switch into a
 * less trusted context is a Spectre v2 mitigation ("RSB stuffing": Intel,
 * "Retpoline: A Branch Target Injection Mitigation", 2018), and this VM's
 * /sys/devices/system/cpu/vulnerabilities/spectre_v2 says "RSB filling".
 * An indirect jump is predicted from the branch target buffer instead,
 * which that leaves alone. On 2026-12-05 (AMD EPYC, kernel 6.18 under a
 * PVM hypervisor), 13 returns right after getppid(2) took 270-297 TSC
 * ticks, about 21 each, against none measurable with no system call
 * before them; returning through the indirect jump they took 27-54. A
 * busy sx_progress returns 6 times after its poll's read: 3 times from
 * the read back into the shard's pass, between a datagram's arrival and
 * its handler, and 3 times from the pass back to the caller, between the
 * handler and the caller's answer.
 *
 * How: GCC's and Clang's function_return("thunk-extern") makes a function
 * jump to __x86_return_thunk where it would return (the name is the
 * compiler's, for the Linux kernel's own return thunk);
 * src/common/ret_thunk.c defines it, hidden. Off (a plain ret) with
 * -DSX_RETURN_THUNK=OFF, off x86-64, on compilers without the attribute,
 * and under CET (__CET__): a shadow stack would still hold the address
 * the jump popped, and the next ret would fault, and indirect branch
 * tracking wants an endbr64 where the jump lands. sx_info says whether it
 * is in (compiled parts: ret_thunk). Only these few functions: the one
 * jump serves them all, and its prediction rests on the path that led to
 * it; a ret is the better guess wherever no system call came between.
 */
#if SX_HAVE_RETURN_THUNK && defined(__x86_64__) && !defined(__CET__) && defined(__has_attribute)
#if __has_attribute(function_return)
#define SX_RET_THUNK 1
#endif
#endif
#ifdef SX_RET_THUNK
#define SX_RET_AFTER_SYSCALL __attribute__((function_return("thunk-extern")))
#else
#define SX_RET_THUNK 0
#define SX_RET_AFTER_SYSCALL
#endif

#endif
