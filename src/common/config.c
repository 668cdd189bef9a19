/* SPDX-License-Identifier: BSD-3-Clause */
/* Configuration: parsing and precedence for the table in config.h. */
#include "common/config.h"

#include "common/log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

typedef struct sx_config_desc {
    const char *name;
    sx_param_type_t type;
    size_t offset;
    const char *default_value;
    double min;
    double max;
    const char *range_text; /* "min..max", from the table by stringification */
    const char *words;      /* ENUM only */
    const char *description;
} sx_config_desc_t;

#define SX_CONFIG_DESC_ROW_(NAME, TYPE, field, def, lo, hi, words_, desc) \
    {.name = #NAME,                                                       \
     .type = SX_PARAM_##TYPE,                                             \
     .offset = offsetof(sx_config_t, field),                              \
     .default_value = def,                                                \
     .min = (lo),                                                         \
     .max = (hi),                                                         \
     .range_text = #lo ".." #hi,                                          \
     .words = words_,                                                     \
     .description = desc},

static const sx_config_desc_t sx_config_descs[] = {SX_CONFIG_TABLE(SX_CONFIG_DESC_ROW_)};
#undef SX_CONFIG_DESC_ROW_

#define SX_CONFIG_COUNT (sizeof(sx_config_descs) / sizeof(sx_config_descs[0]))
_Static_assert(SX_CONFIG_COUNT <= 64, "sx_config_t.given has a bit per parameter");

static const char *const sx_param_type_names[] = {
    [SX_PARAM_UINT] = "uint", [SX_PARAM_SIZE] = "size", [SX_PARAM_DOUBLE] = "double",
    [SX_PARAM_BOOL] = "bool", [SX_PARAM_ENUM] = "enum", [SX_PARAM_STRING] = "string",
};

static const char *sx_config_allowed(const sx_config_desc_t *d)
{
    switch (d->type) {
    case SX_PARAM_ENUM:
        return d->words;
    case SX_PARAM_BOOL:
        return "yes|no (also 1|0, on|off, true|false)";
    case SX_PARAM_STRING:
        return "any text";
    default:
        return d->range_text;
    }
}

SX_API size_t sx_param_count(void)
{
    return SX_CONFIG_COUNT;
}

SX_API int sx_param_info(size_t index, sx_param_info_t *info_p)
{
    if (info_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (index >= SX_CONFIG_COUNT)
        return SX_ERR_NOT_FOUND;
    const sx_config_desc_t *d = &sx_config_descs[index];
    info_p->name = d->name;
    info_p->type = d->type;
    info_p->type_name = sx_param_type_names[d->type];
    info_p->default_value = d->default_value;
    info_p->allowed = sx_config_allowed(d);
    info_p->description = d->description;
    return SX_OK;
}

SX_API int sx_param_parse(size_t index, const char *text, sx_param_value_t *value_p)
{
    if (index >= SX_CONFIG_COUNT)
        return SX_ERR_NOT_FOUND;
    if (text == NULL)
        return SX_ERR_INVALID_PARAM;
    const sx_config_desc_t *d = &sx_config_descs[index];
    /* The engine's own parser, into a field of the parameter's C type. */
    union {
        uint64_t u;
        double d;
        bool b;
        int e;
        char *s;
    } field = {0};
    if (sx_config_parse_typed(d->type, d->words, d->min, d->max, text, &field) != 0)
        return SX_ERR_INVALID_PARAM;
    sx_param_value_t v = {0};
    switch (d->type) {
    case SX_PARAM_UINT:
    case SX_PARAM_SIZE:
        v.u = field.u;
        break;
    case SX_PARAM_DOUBLE:
        v.d = field.d;
        break;
    case SX_PARAM_BOOL:
        v.b = field.b ? 1 : 0;
        break;
    case SX_PARAM_ENUM:
        v.e = (unsigned)field.e;
        break;
    case SX_PARAM_STRING:
        free(field.s);
        return SX_OK;
    }
    if (value_p != NULL)
        *value_p = v;
    return SX_OK;
}

int sx_config_find(const char *name)
{
    if (name == NULL)
        return -1;
    if (strncmp(name, "SX_", 3) == 0)
        name += 3;
    for (size_t i = 0; i < SX_CONFIG_COUNT; i++) {
        if (strcmp(name, sx_config_descs[i].name) == 0)
            return (int)i;
    }
    return -1;
}

/* Levenshtein distance, two rows; names are short so this is cheap. */
static size_t sx_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[64], prev[64];

    if (la >= 63 || lb >= 63)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost =
                (toupper((unsigned char)a[i - 1]) == toupper((unsigned char)b[j - 1])) ? 0 : 1;
            size_t best = prev[j - 1] + cost;
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
        }
        memcpy(prev, row, (lb + 1) * sizeof(size_t));
    }
    return prev[lb];
}

const char *sx_config_closest(const char *name)
{
    const char *best = NULL;
    size_t best_dist = (size_t)-1;

    if (name == NULL)
        return NULL;
    if (strncmp(name, "SX_", 3) == 0)
        name += 3;
    for (size_t i = 0; i < SX_CONFIG_COUNT; i++) {
        size_t d = sx_edit_distance(name, sx_config_descs[i].name);
        if (d < best_dist) {
            best_dist = d;
            best = sx_config_descs[i].name;
        }
    }
    /* A plausible typo is a few edits away; beyond a third of the name the
     * suggestion would be noise. */
    size_t len = strlen(name);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_dist <= limit ? best : NULL;
}

/*
 * Numbers are decimal, or hexadecimal after 0x. A leading zero does not
 * mean octal (strtoull's base 0 would read SX_SHARDS=010 as 8), and no
 * sign or white space is accepted anywhere.
 */
static int sx_parse_number(const char *text, uint64_t *out, char **end_p)
{
    int base = 10;

    if (!isdigit((unsigned char)text[0]))
        return -1;
    if (text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        if (!isxdigit((unsigned char)text[2]))
            return -1;
    }
    errno = 0;
    unsigned long long v = strtoull(text, end_p, base);
    if (errno != 0 || *end_p == text)
        return -1;
    *out = v;
    return 0;
}

static int sx_parse_uint(const char *text, uint64_t *out)
{
    char *end;

    if (sx_parse_number(text, out, &end) != 0 || *end != '\0')
        return -1;
    return 0;
}

static int sx_parse_size(const char *text, uint64_t *out)
{
    char *end;
    uint64_t mult = 1;
    uint64_t v;

    if (sx_parse_number(text, &v, &end) != 0)
        return -1;
    switch (tolower((unsigned char)*end)) {
    case 'k':
        mult = 1ull << 10;
        end++;
        break;
    case 'm':
        mult = 1ull << 20;
        end++;
        break;
    case 'g':
        mult = 1ull << 30;
        end++;
        break;
    default:
        break;
    }
    if (mult != 1 && tolower((unsigned char)*end) == 'b')
        end++;
    if (*end != '\0')
        return -1;
    if (v > UINT64_MAX / mult)
        return -1;
    *out = v * mult;
    return 0;
}

static int sx_parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"1", "y", "yes", "on", "true"};
    static const char *const no[] = {"0", "n", "no", "off", "false"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int sx_parse_enum(const char *text, const char *words, int *out)
{
    size_t tlen = strlen(text);
    int index = 0;

    for (const char *w = words; *w != '\0'; index++) {
        const char *bar = strchr(w, '|');
        size_t wlen = (bar != NULL) ? (size_t)(bar - w) : strlen(w);
        if (wlen == tlen && strncasecmp(w, text, wlen) == 0) {
            *out = index;
            return 0;
        }
        if (bar == NULL)
            break;
        w = bar + 1;
    }
    return -1;
}

int sx_config_parse_typed(sx_param_type_t type, const char *words, double min, double max,
                          const char *text, void *field)
{
    if (text == NULL || field == NULL)
        return -1;
    switch (type) {
    case SX_PARAM_UINT:
    case SX_PARAM_SIZE: {
        uint64_t v;
        int rc = (type == SX_PARAM_UINT) ? sx_parse_uint(text, &v) : sx_parse_size(text, &v);
        if (rc != 0 || (double)v < min || (double)v > max)
            return -1;
        memcpy(field, &v, sizeof(v));
        return 0;
    }
    case SX_PARAM_DOUBLE: {
        char *end;
        if (isspace((unsigned char)text[0]))
            return -1;
        errno = 0;
        double v = strtod(text, &end);
        if (errno != 0 || end == text || *end != '\0' || !isfinite(v) || v < min || v > max)
            return -1;
        memcpy(field, &v, sizeof(v));
        return 0;
    }
    case SX_PARAM_BOOL: {
        bool v;
        if (sx_parse_bool(text, &v) != 0)
            return -1;
        memcpy(field, &v, sizeof(v));
        return 0;
    }
    case SX_PARAM_ENUM: {
        int v;
        if (words == NULL || sx_parse_enum(text, words, &v) != 0)
            return -1;
        memcpy(field, &v, sizeof(v));
        return 0;
    }
    case SX_PARAM_STRING: {
        char *copy = strdup(text);
        char *old;
        if (copy == NULL)
            return -1;
        memcpy(&old, field, sizeof(old));
        free(old);
        memcpy(field, &copy, sizeof(copy));
        return 0;
    }
    }
    return -1;
}

/* Parses @p text into the field of @p d; returns 0 or -1 (value invalid). */
static int sx_config_parse_desc(const sx_config_desc_t *d, const char *text, sx_config_t *cfg)
{
    return sx_config_parse_typed(d->type, d->words, d->min, d->max, text, (char *)cfg + d->offset);
}

int sx_config_parse_one(size_t index, const char *text, sx_config_t *cfg)
{
    if (index >= SX_CONFIG_COUNT || text == NULL || cfg == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_config_parse_desc(&sx_config_descs[index], text, cfg) == 0 ? SX_OK
                                                                         : SX_ERR_INVALID_PARAM;
}

static void sx_config_report_invalid(const sx_config_desc_t *d, const char *value,
                                     const char *source)
{
    sx_error("config", "invalid value SX_%s='%s' (from %s): expected %s %s", d->name, value, source,
             sx_param_type_names[d->type], sx_config_allowed(d));
}

void sx_config_release(sx_config_t *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < SX_CONFIG_COUNT; i++) {
        if (sx_config_descs[i].type == SX_PARAM_STRING) {
            char *s;
            memcpy(&s, (char *)cfg + sx_config_descs[i].offset, sizeof(s));
            free(s);
        }
    }
    memset(cfg, 0, sizeof(*cfg));
}

static bool sx_config_overridden(size_t index, const sx_config_kv_t *kv, size_t kv_count)
{
    for (size_t k = 0; k < kv_count; k++) {
        if (sx_config_find(kv[k].name) == (int)index)
            return true;
    }
    return false;
}

int sx_config_load(sx_config_t *cfg, const sx_config_kv_t *kv, size_t kv_count)
{
    if (cfg == NULL || (kv == NULL && kv_count != 0))
        return SX_ERR_INVALID_PARAM;
    memset(cfg, 0, sizeof(*cfg));

    /* Defaults are table text too, so they pass through the same parser;
     * a bad default is a bug caught by the configuration unit test. */
    for (size_t i = 0; i < SX_CONFIG_COUNT; i++) {
        if (sx_config_parse_desc(&sx_config_descs[i], sx_config_descs[i].default_value, cfg) != 0) {
            sx_config_report_invalid(&sx_config_descs[i], sx_config_descs[i].default_value,
                                     "the built-in default");
            sx_config_release(cfg);
            return SX_ERR_INTERNAL;
        }
    }

    for (size_t i = 0; i < SX_CONFIG_COUNT; i++) {
        char envname[96];
        if (sx_config_overridden(i, kv, kv_count))
            continue; /* the engine parameters win; their value is checked below */
        snprintf(envname, sizeof(envname), "SX_%s", sx_config_descs[i].name);
        const char *value = getenv(envname);
        if (value != NULL && sx_config_parse_desc(&sx_config_descs[i], value, cfg) != 0) {
            sx_config_report_invalid(&sx_config_descs[i], value, "the environment");
            sx_config_release(cfg);
            return SX_ERR_INVALID_PARAM;
        }
        if (value != NULL)
            cfg->given |= 1ull << i;
    }

    for (size_t k = 0; k < kv_count; k++) {
        int index = sx_config_find(kv[k].name);
        if (index < 0 || kv[k].value == NULL) {
            const char *close = sx_config_closest(kv[k].name);
            if (index < 0)
                sx_error("config", "unknown parameter '%s' in engine parameters%s%s%s",
                         kv[k].name != NULL ? kv[k].name : "(null)",
                         close != NULL ? "; did you mean " : "", close != NULL ? close : "",
                         close != NULL ? "?" : " (sx_info lists them)");
            else
                sx_error("config", "parameter '%s' in engine parameters has no value", kv[k].name);
            sx_config_release(cfg);
            return SX_ERR_INVALID_PARAM;
        }
        if (sx_config_parse_desc(&sx_config_descs[index], kv[k].value, cfg) != 0) {
            sx_config_report_invalid(&sx_config_descs[index], kv[k].value, "engine parameters");
            sx_config_release(cfg);
            return SX_ERR_INVALID_PARAM;
        }
        cfg->given |= 1ull << index;
    }
    return SX_OK;
}

static size_t sx_config_unknown_count;
static pthread_once_t sx_config_env_once = PTHREAD_ONCE_INIT;

static void sx_config_scan_environment(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "SX_", 3) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = (eq != NULL) ? (size_t)(eq - *e) : strlen(*e);
        char name[96];
        if (len >= sizeof(name))
            len = sizeof(name) - 1;
        memcpy(name, *e, len);
        name[len] = '\0';
        if (sx_config_find(name) >= 0)
            continue;
        /* The sx_run launcher's variables (rank, size, rendezvous) are
         * not parameters but are ours. */
        if (strncmp(name, "SX_RUN_", 7) == 0)
            continue;
        sx_config_unknown_count++;
        const char *close = sx_config_closest(name);
        if (close != NULL)
            sx_warn("config", "unknown variable %s is ignored; did you mean SX_%s?", name, close);
        else
            sx_warn("config", "unknown variable %s is ignored (sx_info lists the parameters)",
                    name);
    }
}

size_t sx_config_check_environment(void)
{
    pthread_once(&sx_config_env_once, sx_config_scan_environment);
    return sx_config_unknown_count;
}
