/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Engine counters: the shards' single-writer counters summed on demand.
 * Reading takes no lock and stops nobody (each counter is a relaxed
 * atomic), which is what lets a runtime poll them as MPI_T variables.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/service.h"
#include "shard/shard.h"

typedef struct sx_counter_desc {
    const char *name;
    const char *description;
    size_t offset; /* into sx_shard_stats_t */
} sx_counter_desc_t;

static const sx_counter_desc_t sx_shard_counters[] = {
#define SX_COUNTER_DESC_(field, text) {#field, text, offsetof(sx_shard_stats_t, field)},
    SX_SHARD_STATS_TABLE(SX_COUNTER_DESC_)
#undef SX_COUNTER_DESC_
};
#define SX_NSHARD_COUNTERS (sizeof(sx_shard_counters) / sizeof(sx_shard_counters[0]))

/* Counters beyond the shard table: drops by reason, then these. */
enum {
    SX_EXTRA_REQUESTS,
    SX_EXTRA_HOTEL_HIGH,
    SX_EXTRA_SERVICE_WAKEUPS,
    SX_EXTRA_YIELDS,
    SX_EXTRA_OVERSUBSCRIBED,
    SX_EXTRA_WAKEUPS,
    SX_EXTRA_MEM_SHADOW,
    SX_EXTRA_COUNT
};
#define SX_NCOUNTERS (SX_NSHARD_COUNTERS + SX_DROP_COUNT + SX_EXTRA_COUNT)

/* "drop_<reason>" names, built once. */
static char sx_drop_counter_names[SX_DROP_COUNT][32];
static pthread_once_t sx_drop_names_once = PTHREAD_ONCE_INIT;

static void sx_drop_names_init(void)
{
    for (unsigned r = 0; r < SX_DROP_COUNT; r++)
        snprintf(sx_drop_counter_names[r], sizeof(sx_drop_counter_names[r]), "drop_%s",
                 sx_drop_reason_name((sx_drop_reason_t)r));
}

static void sx_counter_at(struct sx_engine *e, size_t i, sx_counter_t *out)
{
    uint64_t v = 0;

    if (i < SX_NSHARD_COUNTERS) {
        const sx_counter_desc_t *d = &sx_shard_counters[i];
        for (unsigned s = 0; s < e->nshards; s++)
            v += sx_stat_read((const sx_stat_t *)((const char *)&e->shards[s]->stats + d->offset));
        out->name = d->name;
        out->description = d->description;
    } else if (i < SX_NSHARD_COUNTERS + SX_DROP_COUNT) {
        unsigned r = (unsigned)(i - SX_NSHARD_COUNTERS);
        for (unsigned s = 0; s < e->nshards; s++)
            v += sx_stat_read(&e->shards[s]->stats.drops[r]);
        out->name = sx_drop_counter_names[r];
        out->description = sx_drop_reason_text((sx_drop_reason_t)r);
    } else if (i - SX_NSHARD_COUNTERS - SX_DROP_COUNT == SX_EXTRA_REQUESTS) {
        for (unsigned s = 0; s < e->nshards; s++)
            v += sx_stat_read(&e->shards[s]->inbox.requests_run);
        out->name = "requests_run";
        out->description = "requests run through the shards' inboxes or directly";
    } else if (i - SX_NSHARD_COUNTERS - SX_DROP_COUNT == SX_EXTRA_SERVICE_WAKEUPS) {
        /* The service is stopped only at destruction: no reader races it. */
        v = e->service != NULL ? sx_stat_read(&e->service->wakeups) : 0;
        out->name = "svc_wakeups";
        out->description = "passes of the engine's service thread, each after a wake-up";
    } else if (i - SX_NSHARD_COUNTERS - SX_DROP_COUNT == SX_EXTRA_YIELDS) {
        v = atomic_load_explicit(&e->yield.yields, memory_order_relaxed);
        out->name = "progress_yields";
        out->description = "cores given up by sx_progress callers that found nothing (SX_YIELD)";
    } else if (i - SX_NSHARD_COUNTERS - SX_DROP_COUNT == SX_EXTRA_OVERSUBSCRIBED) {
        v = atomic_load_explicit(&e->yield.over_checks, memory_order_relaxed);
        out->name = "oversubscribed_checks";
        out->description = "SX_YIELD=auto checks (at most 100 a second) that found threads "
                           "outnumbering cores";
    } else if (i - SX_NSHARD_COUNTERS - SX_DROP_COUNT == SX_EXTRA_WAKEUPS) {
        v = atomic_load_explicit(&e->yield.wakeups, memory_order_relaxed);
        out->name = "progress_wakeups";
        out->description = "of those, waits a datagram ended: the caller progressed the shards "
                           "it came to before returning";
    } else if (i - SX_NSHARD_COUNTERS - SX_DROP_COUNT == SX_EXTRA_MEM_SHADOW) {
        v = atomic_load_explicit(&e->mem.shadow_bytes, memory_order_relaxed);
        out->name = "mem_shadow_bytes";
        out->description = "bytes deregistrations copied for GET answers sent from the region "
                           "and not yet acknowledged";
    } else {
        for (unsigned s = 0; s < e->nshards; s++) {
            sx_hotel_stats_t h;
            if (sx_hotel_stats(e->shards[s]->hotel, &h) == SX_OK && h.high_water > v)
                v = h.high_water;
        }
        out->name = "hotel_high_water";
        out->description = "most un-ACKed packets one shard held at once";
    }
    out->value = v;
}

SX_API int sx_stats_get(sx_engine_h e, sx_counter_t *counters, size_t *count_p)
{
    if (e == NULL || count_p == NULL)
        return sx_api_null("sx_stats_get", e == NULL ? "the engine" : "count_p");
    pthread_once(&sx_drop_names_once, sx_drop_names_init);
    size_t room = (counters != NULL) ? *count_p : 0;
    for (size_t i = 0; i < room && i < SX_NCOUNTERS; i++)
        sx_counter_at(e, i, &counters[i]);
    *count_p = SX_NCOUNTERS;
    return room >= SX_NCOUNTERS ? SX_OK : SX_ERR_TRUNCATED;
}

SX_API int sx_stats_value(sx_engine_h e, const char *name, uint64_t *value_p)
{
    if (e == NULL || name == NULL || value_p == NULL)
        return sx_api_null("sx_stats_value", e == NULL      ? "the engine"
                                             : name == NULL ? "name"
                                                            : "value_p");
    pthread_once(&sx_drop_names_once, sx_drop_names_init);
    for (size_t i = 0; i < SX_NCOUNTERS; i++) {
        sx_counter_t c;
        sx_counter_at(e, i, &c);
        if (strcmp(c.name, name) == 0) {
            *value_p = c.value;
            return SX_OK;
        }
    }
    return SX_ERR_NOT_FOUND;
}

/* The report itself, written to @p out (a memory stream). */
static void stats_report(struct sx_engine *e, const sx_counter_t *c, size_t n, FILE *out, bool json)
{
    uint64_t frames = 0, packets = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(c[i].name, "frames_sent") == 0)
            frames = c[i].value;
        if (strcmp(c[i].name, "data_sent") == 0)
            packets = c[i].value;
    }
    double per = packets ? (double)frames / (double)packets : 0.0;
    if (json) {
        fprintf(out, "{\"engine\":\"%s\",\"shards\":%u,\"messages_per_datagram\":%.3f", e->name,
                e->nshards, per);
        for (size_t i = 0; i < n; i++)
            fprintf(out, ",\"%s\":%llu", c[i].name, (unsigned long long)c[i].value);
        fprintf(out, "}\n");
        return;
    }
    fprintf(out, "shardx stats for %s (%u shards)\n", e->name, e->nshards);
    for (size_t i = 0; i < n; i++) {
        if (c[i].value != 0)
            fprintf(out, "  %-22s %12llu  %s\n", c[i].name, (unsigned long long)c[i].value,
                    c[i].description);
    }
    fprintf(out, "  %-22s %12.3f  frames per data packet\n", "messages_per_datagram", per);
}

/*
 * The report goes out in one write: stderr is unbuffered, so a report
 * printed line by line (a field at a time in JSON) interleaved with the
 * other ranks' when their engines ended together on one terminal or file,
 * as sx_bench's two ranks do, and no line could be told apart by rank.
 */
void sx_engine_stats_print(struct sx_engine *e, FILE *out, bool json)
{
    sx_counter_t c[SX_NCOUNTERS];
    size_t n = SX_NCOUNTERS;
    char *text = NULL;
    size_t len = 0;

    if (sx_stats_get(e, c, &n) != SX_OK)
        return;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL) {
        stats_report(e, c, n, out, json); /* no memory: line by line */
        return;
    }
    stats_report(e, c, n, mem, json);
    if (fclose(mem) == 0)
        (void)fwrite(text, 1, len, out);
    else
        stats_report(e, c, n, out, json);
    fflush(out);
    free(text);
}
