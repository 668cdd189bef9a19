/* SPDX-License-Identifier: BSD-3-Clause */
/* Recursive lock set-up; the lock itself is inline in rlock.h. */
#include "locks/rlock.h"

#include <shardx.h>

int sx_rlock_init(sx_rlock_t *l)
{
    pthread_mutexattr_t attr;

    if (pthread_mutexattr_init(&attr) != 0)
        return SX_ERR_NO_MEMORY;
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init(&l->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0)
        return SX_ERR_NO_MEMORY;
    atomic_init(&l->owner, 0);
    l->depth = 0;
    return SX_OK;
}

void sx_rlock_destroy(sx_rlock_t *l)
{
    pthread_mutex_destroy(&l->mutex);
}
