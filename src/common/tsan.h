/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Happens-before annotations for ThreadSanitizer.
 *
 * liburcu and Concurrency Kit order memory with inline assembly that TSan
 * cannot see, so TSan would report the data handed through their queues
 * and grace periods as races. Where such a library call is what orders two
 * accesses, we say so with a release/acquire pair on an address both sides
 * know. Outside TSan builds these compile to nothing.
 */
#ifndef SX_COMMON_TSAN_H
#define SX_COMMON_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define SX_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SX_TSAN_ENABLED 1
#endif
#endif

#ifdef SX_TSAN_ENABLED
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define SX_TSAN_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#define SX_TSAN_RELEASE(addr) __tsan_release((void *)(addr))
#else
#define SX_TSAN_ACQUIRE(addr) ((void)(addr))
#define SX_TSAN_RELEASE(addr) ((void)(addr))
#endif

#endif /* SX_COMMON_TSAN_H */
