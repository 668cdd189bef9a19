/* SPDX-License-Identifier: BSD-3-Clause */
/* A program that uses an installed shardx through its public header only. */
#include <shardx.h>
#include <stdio.h>
#include <string.h>

#if !defined(SX_VERSION) || !defined(SX_API_VERSION) || SX_API_VERSION < 1
#error "shardx.h has no version macros"
#endif
#define SX_STR_(x) #x
#define SX_STR(x)  SX_STR_(x)

int main(void)
{
    sx_build_info_t info;
    sx_engine_h engine;
    unsigned shards = 0;

    if (sx_build_info(&info) != SX_OK)
        return 1;
    /* The header's version is the library's. */
    const char *header =
        SX_STR(SX_VERSION_MAJOR) "." SX_STR(SX_VERSION_MINOR) "." SX_STR(SX_VERSION_PATCH);
    if (strcmp(header, info.version) != 0) {
        fprintf(stderr, "consumer: header version %s, library %s\n", header, info.version);
        return 1;
    }
    int rc = sx_engine_create(NULL, &engine);
    if (rc != SX_OK) {
        fprintf(stderr, "sx_engine_create: %s\n", sx_strerror(rc));
        return 1;
    }
    sx_engine_shard_count(engine, &shards);
    rc = sx_progress(engine);
    sx_engine_destroy(engine);
    if (rc < 0 || shards == 0)
        return 1;
    printf("consumer: shardx %s, %u shard(s)\n", info.version, shards);
    return 0;
}
