/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * System calls made in place, for the few a progress pass makes on every
 * message (the udp transport's reads and writes): the `syscall`
 * instruction with the kernel's register convention, returning the
 * result or the negated errno, as the kernel does (syscall(2), "Architecture
 * calling conventions"). errno is left alone.
 *
 * Why not syscall(2): it is a function of libc's, reached through the
 * PLT, that stores errno in thread-local storage through libc's GOT. On a
 * kernel with page-table isolation and no PCID (hot.h) each of those is a
 * page, and each page a TLB miss after every system call: four of the
 * pages an empty progress pass touches (a trace of `sx_bench latency`
 * under valgrind's lackey, docs/tuning.md). Elsewhere syscall(2) is used,
 * and its errno negated.
 */
#ifndef SX_COMMON_SYSCALL_H
#define SX_COMMON_SYSCALL_H

#include <errno.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
static inline long sx_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__) && defined(__GNUC__)
static inline long sx_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}
#else
static inline long sx_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    long ret = syscall(nr, a, b, c, d, e, f);
    return ret == -1 ? -(long)errno : ret;
}
#endif

/* Five arguments: the sixth register is passed as 0, which a call of five
 * ignores. */
static inline long sx_syscall5(long nr, long a, long b, long c, long d, long e)
{
    return sx_syscall6(nr, a, b, c, d, e, 0);
}

#endif /* SX_COMMON_SYSCALL_H */
