/* SPDX-License-Identifier: BSD-3-Clause */
/* A program that uses an installed shardx through its public header only. */
#include <shardx.h>
#include <stdio.h>

int main(void)
{
    sx_build_info_t info;
    sx_engine_h engine;
    unsigned shards = 0;

    if (sx_build_info(&info) != SX_OK)
        return 1;
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
