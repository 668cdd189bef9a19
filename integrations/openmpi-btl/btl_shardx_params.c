/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * btl_shardx_<name>: shardx's configuration table as Open MPI MCA
 * parameters, typed, with shardx's defaults and at levels that put the
 * common ones in `ompi_info --param btl shardx` (level 1) and
 * `--level 4`; and the engine settings made from them, checked with
 * shardx's own parser so that an error names the parameter the user set.
 */
#include "btl_shardx.h"

#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/base/mca_base_var_enum.h"
#include "opal/util/output.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Open MPI's information levels (ompi_info --level, default 1): 1-3 for
 * end users, 4-6 for those tuning an application, 7-9 for developers.
 * Where to reach peers and how soon to give up on them is what a user
 * sets first; sizes and timers are tuning; fault injection and the
 * sequence start are for testing shardx itself. A parameter missing here
 * (one added to shardx later) is at level 5.
 */
static const struct {
    const char *name;
    mca_base_var_info_lvl_t level;
} shardx_levels[] = {
    {"TRANSPORTS", OPAL_INFO_LVL_1},
    {"BIND_ADDR", OPAL_INFO_LVL_1},
    {"NET_DEVICES", OPAL_INFO_LVL_1},
    {"PEER_TIMEOUT_MS", OPAL_INFO_LVL_1},
    {"CONNECT_TIMEOUT_MS", OPAL_INFO_LVL_1},
    {"YIELD", OPAL_INFO_LVL_1},
    {"SHARDS", OPAL_INFO_LVL_2},
    {"OFI_PROVIDER", OPAL_INFO_LVL_2},
    {"LOG_LEVEL", OPAL_INFO_LVL_2},
    {"LOG_FILE", OPAL_INFO_LVL_2},
    {"PROGRESS", OPAL_INFO_LVL_3},
    {"THREAD_MODE", OPAL_INFO_LVL_3},
    {"STATS", OPAL_INFO_LVL_3},
    {"WATCHDOG_S", OPAL_INFO_LVL_3},
    {"WATCHDOG_ABORT", OPAL_INFO_LVL_3},
    {"DUMP_SIGNAL", OPAL_INFO_LVL_3},
    {"WINDOW", OPAL_INFO_LVL_4},
    {"MAX_INFLIGHT", OPAL_INFO_LVL_4},
    {"RCVBUF", OPAL_INFO_LVL_4},
    {"SNDBUF", OPAL_INFO_LVL_4},
    {"SENDI_HOLD_US", OPAL_INFO_LVL_4},
    {"REPOLL", OPAL_INFO_LVL_4},
    {"SPIN_US", OPAL_INFO_LVL_4},
    {"SERVICE_US", OPAL_INFO_LVL_4},
    {"FAULT", OPAL_INFO_LVL_9},
    {"SEQ_START", OPAL_INFO_LVL_9},
};

static mca_base_var_info_lvl_t shardx_level(const char *name)
{
    for (size_t i = 0; i < sizeof(shardx_levels) / sizeof(shardx_levels[0]); i++)
        if (strcmp(shardx_levels[i].name, name) == 0)
            return shardx_levels[i].level;
    return OPAL_INFO_LVL_5;
}

/* The BTL's own defaults where they differ from shardx's. ob1 hands over
 * one eager message at a time with no "more follows", so holding a burst
 * of sendi's until the next progress call (at most 50 us) lets them share
 * datagrams. Between two namespace hosts at MTU 1500 it took the 8-byte
 * message rate from 431 k to 2.66 M messages/s with the 8-byte latency
 * unchanged (bench/bench_mpi.sh's "rate" and "pingpong"), both hosts'
 * ranks then on one core; each rank on a core of its own, from 161-167 k
 * to 1.11-1.14 M (2026-12-04, four rounds; tcp 128-135 k). SX_MODEX is not
 * a parameter here: Open MPI's modex carries the cards. */
static const char *shardx_default(const sx_param_info_t *info)
{
    if (strcmp(info->name, "SENDI_HOLD_US") == 0)
        return "50";
    return info->default_value;
}

/* btl_shardx_<name>'s <name> for shardx's NAME. */
static const char *shardx_mca_name(const char *sx_name, char *buf, size_t len)
{
    size_t k = 0;
    for (; sx_name[k] != '\0' && k + 1 < len; k++)
        buf[k] = (char)tolower((unsigned char)sx_name[k]);
    buf[k] = '\0';
    return buf;
}

/* Word @p index of a '|'-separated list, into @p buf. */
static const char *shardx_word(const char *words, int index, char *buf, size_t len)
{
    const char *w = words;
    for (int i = 0; i < index && w != NULL; i++) {
        w = strchr(w, '|');
        if (w != NULL)
            w++;
    }
    if (w == NULL)
        return NULL;
    size_t n = strcspn(w, "|");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), w);
    return buf;
}

/* An MCA enumerator of shardx's words for an enum parameter (NULL on
 * failure: the parameter is then an int). */
static mca_base_var_enum_t *shardx_enum(const sx_param_info_t *info)
{
    mca_base_var_enum_value_t values[32];
    char words[32][32];
    int n = 0;
    for (; n < 31 && shardx_word(info->allowed, n, words[n], sizeof(words[n])) != NULL; n++)
        values[n] = (mca_base_var_enum_value_t){.value = n, .string = words[n]};
    values[n] = (mca_base_var_enum_value_t){.value = 0, .string = NULL};
    char ename[96];
    snprintf(ename, sizeof(ename), "btl_shardx_%s", info->name);
    mca_base_var_enum_t *e = NULL;
    /* The enumerator copies the strings. */
    return mca_base_var_enum_create(ename, values, &e) == OPAL_SUCCESS ? e : NULL;
}

/* @p text (shardx's syntax) into @p p as the parameter's type. */
static int shardx_param_set(mca_btl_shardx_param_t *p, const sx_param_info_t *info, size_t index,
                            const char *text)
{
    sx_param_value_t v;
    if (sx_param_parse(index, text, &v) != SX_OK)
        return -1;
    switch (info->type) {
    case SX_PARAM_UINT:
        p->v.u = v.u;
        break;
    case SX_PARAM_SIZE:
        p->v.z = (size_t)v.u;
        break;
    case SX_PARAM_DOUBLE:
        p->v.d = v.d;
        break;
    case SX_PARAM_BOOL:
        p->v.b = v.b != 0;
        break;
    case SX_PARAM_ENUM:
        p->v.e = (int)v.e;
        break;
    case SX_PARAM_STRING:
        p->v.s = (char *)text; /* MCA copies the default */
        break;
    }
    return 0;
}

void mca_btl_shardx_params_register(mca_btl_shardx_component_t *c)
{
    size_t n = sx_param_count();

    if (n > SHARDX_MAX_ENGINE_PARAMS) {
        opal_output(0,
                    "btl shardx: %zu shardx parameters, room for %d: the rest have no "
                    "btl_shardx_ name (SX_ environment variables still work)",
                    n, SHARDX_MAX_ENGINE_PARAMS);
        n = SHARDX_MAX_ENGINE_PARAMS;
    }
    c->sx_param_count = n;
    for (size_t i = 0; i < n; i++) {
        mca_btl_shardx_param_t *p = &c->sx_params[i];
        sx_param_info_t info;
        char name[64], desc[1200];

        p->var_index = -1;
        if (sx_param_info(i, &info) != SX_OK || strcmp(info.name, "MODEX") == 0)
            continue;
        if (strlen(info.name) >= sizeof(name))
            continue;
        shardx_mca_name(info.name, name, sizeof(name));
        const char *def = shardx_default(&info);
        if (shardx_param_set(p, &info, i, def) != 0)
            continue; /* shardx's own unit test catches a bad default */
        mca_base_var_type_t type = MCA_BASE_VAR_TYPE_STRING;
        mca_base_var_enum_t *en = NULL;
        switch (info.type) {
        case SX_PARAM_UINT:
            type = MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG;
            break;
        case SX_PARAM_SIZE:
            type = MCA_BASE_VAR_TYPE_SIZE_T;
            break;
        case SX_PARAM_DOUBLE:
            type = MCA_BASE_VAR_TYPE_DOUBLE;
            break;
        case SX_PARAM_BOOL:
            type = MCA_BASE_VAR_TYPE_BOOL;
            break;
        case SX_PARAM_ENUM:
            type = MCA_BASE_VAR_TYPE_INT;
            en = shardx_enum(&info);
            break;
        case SX_PARAM_STRING:
            break;
        }
        snprintf(desc, sizeof(desc),
                 "%s Allowed: %s (shardx's %s%s%s). When this parameter is not set, SX_%s in the "
                 "environment applies.",
                 info.description, info.allowed, info.type_name,
                 strcmp(def, info.default_value) != 0 ? "; the BTL's default differs from "
                                                        "shardx's, which is "
                                                      : "",
                 strcmp(def, info.default_value) != 0 ? info.default_value : "", info.name);
        /* MCA copies name and description, and retains the enumerator. */
        p->var_index = mca_base_component_var_register(&c->super.btl_version, name, desc, type, en,
                                                       0, 0, shardx_level(info.name),
                                                       MCA_BASE_VAR_SCOPE_READONLY, &p->v);
        if (en != NULL)
            OBJ_RELEASE(en);
    }
}

/* Where the value of btl_shardx_<@p lower>, variable @p var_index, came
 * from, for messages. */
static const char *shardx_source(int var_index, const char *lower, char *buf, size_t len)
{
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    const char *file = NULL;
    (void)mca_base_var_get_value(var_index, NULL, &source, &file);
    switch (source) {
    case MCA_BASE_VAR_SOURCE_DEFAULT:
        return "the BTL's default";
    case MCA_BASE_VAR_SOURCE_COMMAND_LINE:
        return "set on the command line";
    case MCA_BASE_VAR_SOURCE_ENV:
        snprintf(buf, len, "set as OMPI_MCA_btl_shardx_%s in the environment, as mpirun --mca does",
                 lower);
        return buf;
    case MCA_BASE_VAR_SOURCE_FILE:
    case MCA_BASE_VAR_SOURCE_OVERRIDE:
        snprintf(buf, len, "set in %s", file != NULL ? file : "a parameter file");
        return buf;
    default:
        return "set by the program";
    }
}

/* The parameter's value in shardx's syntax, into @p buf; NULL when it is
 * at its default (the engine then reads SX_<NAME>, else its default). */
static const char *shardx_param_text(const mca_btl_shardx_param_t *p, const sx_param_info_t *info,
                                     char *buf, size_t len)
{
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    if (p->var_index < 0 ||
        mca_base_var_get_value(p->var_index, NULL, &source, NULL) != OPAL_SUCCESS ||
        source == MCA_BASE_VAR_SOURCE_DEFAULT)
        return NULL;
    switch (info->type) {
    case SX_PARAM_UINT:
        snprintf(buf, len, "%llu", p->v.u);
        return buf;
    case SX_PARAM_SIZE:
        snprintf(buf, len, "%zu", p->v.z);
        return buf;
    case SX_PARAM_DOUBLE:
        snprintf(buf, len, "%.17g", p->v.d);
        return buf;
    case SX_PARAM_BOOL:
        return p->v.b ? "yes" : "no";
    case SX_PARAM_ENUM:
        if (shardx_word(info->allowed, p->v.e, buf, len) != NULL)
            return buf;
        snprintf(buf, len, "%d", p->v.e); /* refused below, by name */
        return buf;
    case SX_PARAM_STRING:
        return p->v.s != NULL ? p->v.s : "";
    }
    return NULL;
}

int mca_btl_shardx_params_config(mca_btl_shardx_component_t *c, sx_config_kv_t *kv,
                                 char texts[][SHARDX_PARAM_TEXT_MAX], size_t *n_p)
{
    size_t n = 0;
    int rc = OPAL_SUCCESS;

    for (size_t i = 0; i < c->sx_param_count; i++) {
        sx_param_info_t info;
        char where[PATH_MAX + 64];
        if (sx_param_info(i, &info) != SX_OK)
            continue;
        const char *text = shardx_param_text(&c->sx_params[i], &info, texts[n], sizeof(texts[n]));
        if (text == NULL) {
            /* At its default: the environment's SX_<NAME> applies, else
             * the default this parameter shows, which for a BTL default
             * that differs from shardx's is passed on explicitly. */
            const char *def = shardx_default(&info);
            char env[96];
            snprintf(env, sizeof(env), "SX_%s", info.name);
            if (strcmp(def, info.default_value) == 0 || getenv(env) != NULL)
                continue;
            text = def;
        } else if (sx_param_parse(i, text, NULL) != SX_OK) {
            char lower[64];
            shardx_mca_name(info.name, lower, sizeof(lower));
            opal_output(0,
                        "btl shardx: invalid value btl_shardx_%s=%s (%s): expected %s %s "
                        "(shardx's SX_%s)",
                        lower, text,
                        shardx_source(c->sx_params[i].var_index, lower, where, sizeof(where)),
                        info.type_name, info.allowed, info.name);
            rc = OPAL_ERR_BAD_PARAM;
            continue;
        }
        kv[n].name = info.name;
        kv[n].value = text;
        n++;
    }
    *n_p = n;
    return rc;
}

void mca_btl_shardx_params_report(mca_btl_shardx_component_t *c, const sx_config_kv_t *kv, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        int index = -1;
        for (size_t i = 0; i < c->sx_param_count && index < 0; i++) {
            sx_param_info_t info;
            if (sx_param_info(i, &info) == SX_OK && strcmp(info.name, kv[k].name) == 0)
                index = (int)i;
        }
        char lower[64], where[PATH_MAX + 64];
        shardx_mca_name(kv[k].name, lower, sizeof(lower));
        const char *source =
            index >= 0 && c->sx_params[index].var_index >= 0
                ? shardx_source(c->sx_params[index].var_index, lower, where, sizeof(where))
                : "the BTL's default";
        opal_output(0, "btl shardx:   SX_%s='%s' came from btl_shardx_%s (%s)", kv[k].name,
                    kv[k].value, lower, source);
    }
}
