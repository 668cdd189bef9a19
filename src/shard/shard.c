/* Shard lifetime and progress; see shard.h. */
#include "shard/shard.h"

#include <shardx.h>
#include <stdlib.h>
#include <string.h>

#include "common/time.h"

static void sx_shard_on_evict(void *occupant, void *arg)
{
    sx_shard_t *shard = arg;
    sx_shard_guest_t *guest = occupant;

    guest->on_evict(shard, guest);
}

int sx_shard_create(const sx_shard_conf_t *conf, sx_shard_t **shard_p)
{
    sx_shard_t *s;
    int rc;

    if (conf == NULL || shard_p == NULL || conf->tick_ns == 0)
        return SX_ERR_INVALID_PARAM;
    /* Aligned so the token and the inbox ends sit on their own lines. */
    if (posix_memalign((void **)&s, 64, sizeof(*s)) != 0)
        return SX_ERR_NO_MEMORY;
    memset(s, 0, sizeof(*s));
    sx_token_init(&s->token);
    sx_inbox_init(&s->inbox);
    s->index = conf->index;
    s->core = conf->core;
    s->first_pu = conf->first_pu;
    s->numa_node = conf->numa_node;
    s->cpuset = (conf->cpuset != NULL) ? hwloc_bitmap_dup(conf->cpuset) : hwloc_bitmap_alloc();
    if (s->cpuset == NULL) {
        free(s);
        return SX_ERR_NO_MEMORY;
    }
    rc = sx_wheel_init(conf->tick_ns, 0, sx_time_ns(), &s->wheel);
    if (rc == SX_OK)
        rc = sx_hotel_init(s->wheel, conf->hotel_rooms, sx_shard_on_evict, s, &s->hotel);
    if (rc != SX_OK) {
        sx_shard_destroy(s);
        return rc;
    }
    *shard_p = s;
    return SX_OK;
}

void sx_shard_destroy(sx_shard_t *shard)
{
    if (shard == NULL)
        return;
    sx_inbox_fini(&shard->inbox, shard);
    sx_hotel_fini(shard->hotel);
    sx_wheel_fini(shard->wheel);
    hwloc_bitmap_free(shard->cpuset);
    free(shard);
}

bool sx_shard_submit_mpsc(sx_shard_t *shard, sx_inbox_req_t *req)
{
    return sx_delegate_submit_mpsc(&shard->token, &shard->inbox, shard, req);
}

int sx_shard_progress(sx_shard_t *shard)
{
    size_t ran = 0;

    if (!sx_delegate_enter(&shard->token, &shard->inbox, shard, &ran))
        return 0;
    unsigned fired = sx_wheel_expire(shard->wheel, sx_time_ns());
    /* Counters are written only with the token held (single writer). */
    sx_stat_add(&shard->stats.progress_calls, 1);
    sx_stat_add(&shard->stats.timers_fired, fired);
    ran += sx_delegate_leave_locked(&shard->token, &shard->inbox, shard);
    return (int)(ran + fired);
}

int sx_shard_checkin_locked(sx_shard_t *shard, sx_shard_guest_t *guest, uint64_t deadline_ns,
                            sx_hotel_key_t *key_p)
{
    SX_OWNERSHIP_ASSERT(sx_token_held_by_me(&shard->token));
    if (guest == NULL || guest->on_evict == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_hotel_checkin(shard->hotel, guest, deadline_ns, key_p);
}
