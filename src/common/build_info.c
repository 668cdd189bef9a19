/* SPDX-License-Identifier: BSD-3-Clause */
/* What this build of shardx contains, for sx_info and for bug reports. */
#include <shardx.h>

#include <string.h>

#include "build_config.h"
#include "common/hot.h"

SX_API int sx_build_info(sx_build_info_t *info_p)
{
    unsigned features = 0;

    if (info_p == NULL)
        return SX_ERR_INVALID_PARAM;
        /* The OFI, verbs, rdmacm and PMIx bits are set here by the parts that use
         * them, once those parts are compiled; a library merely found at build
         * time shows in info_p->optional only. */
#if SX_HAVE_OFI
    features |= SX_FEATURE_OFI; /* src/transports/ofi.c */
#endif
#if SX_HAVE_VERBS
    features |= SX_FEATURE_VERBS; /* src/transports/verbs.c */
#endif
#if SX_HAVE_RDMACM && SX_HAVE_VERBS
    features |= SX_FEATURE_RDMACM; /* src/cpc/rdmacm.c, built with verbs */
#endif
#if SX_HAVE_PMIX
    features |= SX_FEATURE_PMIX; /* src/bootstrap/modex_pmix.c */
#endif
#ifdef SX_DEBUG_LOCKS
    features |= SX_FEATURE_DEBUG;
#endif
#if SX_RET_THUNK
    features |= SX_FEATURE_RET_THUNK; /* src/common/ret_thunk.c */
#endif
    if (strcmp(SX_SANITIZE_NAME, "address") == 0)
        features |= SX_FEATURE_ASAN;
    if (strcmp(SX_SANITIZE_NAME, "thread") == 0)
        features |= SX_FEATURE_TSAN;
    info_p->version = SX_VERSION_STRING;
    info_p->build_type = SX_BUILD_TYPE;
    info_p->compiler = SX_COMPILER;
    info_p->dependencies = SX_DEPENDENCIES;
    info_p->optional = SX_OPTIONAL_FOUND;
    info_p->features = features;
    return SX_OK;
}
