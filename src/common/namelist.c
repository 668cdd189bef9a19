/* SPDX-License-Identifier: BSD-3-Clause */
/* Name lists (SX_NET_DEVICES); see namelist.h. */
#include "common/namelist.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <shardx.h>

/* Device and interface names in practice: mlx5_0, hfi1_0, enp65s0f1np1,
 * eth0:1. White space is refused rather than trimmed, as everywhere in
 * the configuration, so "mlx5_0, mlx5_1" is reported instead of guessed. */
static int sx_namelist_char_ok(char c, bool subnets)
{
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.' || c == ':' ||
           (subnets && c == '/');
}

static int sx_namelist_parse_any(const char *spec, char (*names)[SX_NAMELIST_NAME_MAX],
                                 unsigned max, unsigned *count_p, bool subnets, char *why,
                                 size_t why_len)
{
    char parsed[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX];
    unsigned n = 0;

    if (max > SX_NAMELIST_MAX)
        max = SX_NAMELIST_MAX;
    if (spec == NULL || spec[0] == '\0') {
        *count_p = 0;
        return SX_OK;
    }
    if (spec[0] == '^') {
        snprintf(why, why_len, "exclusion ('^') is not supported; list the devices to use instead");
        return SX_ERR_INVALID_PARAM;
    }
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == 0) {
            snprintf(why, why_len, "an empty name at offset %zu (two commas, or one at an end)",
                     (size_t)(p - spec));
            return SX_ERR_INVALID_PARAM;
        }
        if (len >= SX_NAMELIST_NAME_MAX) {
            snprintf(why, why_len, "the name '%.*s...' is longer than %d bytes", 16, p,
                     SX_NAMELIST_NAME_MAX - 1);
            return SX_ERR_INVALID_PARAM;
        }
        for (size_t i = 0; i < len; i++) {
            if (!sx_namelist_char_ok(p[i], subnets)) {
                unsigned char c = (unsigned char)p[i];
                if (isgraph(c))
                    snprintf(why, why_len, "'%c' in '%.*s' is not allowed in a device name", c,
                             (int)len, p);
                else
                    snprintf(why, why_len,
                             "character 0x%02x in '%.*s' is not allowed in a device name "
                             "(no white space)",
                             c, (int)len, p);
                return SX_ERR_INVALID_PARAM;
            }
        }
        if (n == max) {
            snprintf(why, why_len, "more than %u names", max);
            return SX_ERR_INVALID_PARAM;
        }
        memcpy(parsed[n], p, len);
        parsed[n][len] = '\0';
        if (sx_namelist_find((const char(*)[SX_NAMELIST_NAME_MAX])parsed, n, parsed[n]) >= 0) {
            snprintf(why, why_len, "'%s' is named twice", parsed[n]);
            return SX_ERR_INVALID_PARAM;
        }
        n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    memcpy(names, parsed, n * sizeof(parsed[0]));
    *count_p = n;
    return SX_OK;
}

int sx_namelist_parse(const char *spec, char (*names)[SX_NAMELIST_NAME_MAX], unsigned max,
                      unsigned *count_p, char *why, size_t why_len)
{
    return sx_namelist_parse_any(spec, names, max, count_p, false, why, why_len);
}

int sx_namelist_parse_filter(const char *spec, char (*names)[SX_NAMELIST_NAME_MAX], unsigned max,
                             unsigned *count_p, bool *exclude_p, char *why, size_t why_len)
{
    *exclude_p = spec != NULL && spec[0] == '^';
    if (*exclude_p) {
        spec++;
        if (spec[0] == '\0') {
            snprintf(why, why_len, "'^' with nothing to exclude");
            return SX_ERR_INVALID_PARAM;
        }
        if (spec[0] == '^') {
            snprintf(why, why_len, "'^' twice");
            return SX_ERR_INVALID_PARAM;
        }
    }
    return sx_namelist_parse_any(spec, names, max, count_p, true, why, why_len);
}

int sx_namelist_find(const char (*names)[SX_NAMELIST_NAME_MAX], unsigned count, const char *name)
{
    for (unsigned i = 0; i < count; i++) {
        if (strcmp(names[i], name) == 0)
            return (int)i;
    }
    return -1;
}
