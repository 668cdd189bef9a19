/* SPDX-License-Identifier: BSD-3-Clause */
/* The clock function behind sx_time_ns; see time.h. */
#include "common/time.h"

#include <dlfcn.h>
#include <string.h>

sx_clock_fn_t sx_clock_gettime_fn = clock_gettime;

/*
 * Finds the vDSO's own clock_gettime (vdso(7) names it per architecture),
 * once, before main or as the library loads, so that no thread reads the
 * pointer while it changes. glibc lists the vDSO among the loaded objects
 * under its soname, so dlopen with RTLD_NOLOAD finds it and loads nothing.
 * Without a vDSO (valgrind hides it) libc's clock_gettime stays.
 */
__attribute__((constructor)) static void sx_time_find_vdso(void)
{
#if defined(__x86_64__)
    const char *name = "__vdso_clock_gettime", *version = "LINUX_2.6";
#elif defined(__aarch64__)
    const char *name = "__kernel_clock_gettime", *version = "LINUX_2.6.39";
#else
    const char *name = NULL, *version = NULL; /* no vDSO clock named here */
#endif
    if (name == NULL)
        return;
    void *h = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == NULL)
        return;
    void *sym = dlvsym(h, name, version);
    if (sym != NULL) {
        sx_clock_fn_t fn;
        memcpy(&fn, &sym, sizeof(fn)); /* an object pointer to a function's (POSIX dlsym) */
        struct timespec ts;
        if (fn(CLOCK_MONOTONIC, &ts) == 0)
            sx_clock_gettime_fn = fn;
    }
    dlclose(h);
}
