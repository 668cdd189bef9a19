/* SPDX-License-Identifier: BSD-3-Clause */
/* What attack_victim.c and attacker.c both need: the script's signal
 * files, and little-endian fields of cards and packets read by hand. */
#ifndef SX_TESTS_CLUSTER_ATTACK_UTIL_H
#define SX_TESTS_CLUSTER_ATTACK_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

/* Whether DIR/NAME exists (attack_job.sh's go and stop files). */
static inline bool file_exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

/* The little-endian unsigned integer of @p bytes bytes at @p p. */
static inline uint64_t get_le(const uint8_t *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
