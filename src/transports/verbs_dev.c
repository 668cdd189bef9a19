/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * verbs_dev: the RDMA devices the verbs transport may use: their list
 * (ibv_get_device_list), the first ACTIVE port of each, what SX_NET_DEVICES
 * allows, and the query and devices slots that report them. verbs.c opens
 * an interface on one of them and verbs_io.c is its data path; verbs_int.h
 * is what the files share. Any thread may call what is here.
 *
 * Linking: libibverbs is linked, not opened with dlopen as ofi_dev.c
 * opens libfabric. libfabric's constructors load every provider and its
 * dependencies at process start; rdma-core's libibverbs loads its
 * providers (libmlx5-rdmav34.so, ...) only inside ibv_get_device_list, and
 * only when sysfs lists a device that no loaded provider claims. Linked,
 * it costs a process that never selects verbs the mapping of libibverbs
 * and libnl, and a query on a machine without RDMA devices one scan of
 * /sys (docs/tuning.md, section "Loading libfabric and libibverbs", has
 * the measurements).
 */
#include "transports/verbs_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include <shardx.h>

#include "common/log.h"
#include "common/namelist.h"
#include "transports/verbs_addr.h"

/* ------------------------------------------------------------------ */
/* Devices                                                              */

static atomic_flag verbs_absent_logged = ATOMIC_FLAG_INIT;

/* Whether SX_NET_DEVICES (empty: any) lets us use device @p name. The
 * list is read as udp and the engine read it (common/namelist.h); the
 * engine refused a malformed one before any transport saw it, so a parse
 * failure here can only keep every device out. */
static bool verbs_name_listed(const char *filter, const char *name)
{
    char names[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX];
    unsigned n = 0;
    bool exclude = false;
    char why[64];

    if (filter == NULL || filter[0] == '\0')
        return true;
    if (sx_namelist_parse_filter(filter, names, SX_NAMELIST_MAX, &n, &exclude, why, sizeof(why)) !=
        SX_OK)
        return false;
    /* A subnet names no RDMA device: it never matches. */
    return (sx_namelist_find((const char(*)[SX_NAMELIST_NAME_MAX])names, n, name) >= 0) != exclude;
}

const char *sx_verbs_link_name(uint8_t link_layer)
{
    return link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
}

/* Fills @p d with the first ACTIVE port of @p ctx, or with why there is none. */
static void verbs_probe_ports(struct ibv_context *ctx, verbs_dev_info_t *d)
{
    struct ibv_device_attr attr;
    size_t off = 0;

    if (ibv_query_device(ctx, &attr) != 0) {
        snprintf(d->why, sizeof(d->why), "ibv_query_device: %s", strerror(errno));
        return;
    }
    for (unsigned p = 1; p <= attr.phys_port_cnt && p <= UINT8_MAX; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) {
            off += (size_t)snprintf(d->why + off, off < sizeof(d->why) ? sizeof(d->why) - off : 0,
                                    "%sport %u: %s", off ? ", " : "", p, strerror(errno));
            continue;
        }
        if (pa.state == IBV_PORT_ACTIVE) {
            d->port = (uint8_t)p;
            d->link_layer = pa.link_layer;
            d->mtu = sx_verbs_mtu_bytes(pa.active_mtu);
            return;
        }
        off += (size_t)snprintf(d->why + off, off < sizeof(d->why) ? sizeof(d->why) - off : 0,
                                "%sport %u %s", off ? ", " : "", p, ibv_port_state_str(pa.state));
    }
    if (off == 0)
        snprintf(d->why, sizeof(d->why), "no port");
}

/*
 * Lists up to @p max devices with what their ports say; sets *n_p. SX_OK,
 * or SX_ERR_NO_DEVICE with @p why saying that ibv_get_device_list listed
 * none (the kernel without RDMA support answers ENOSYS).
 */
static int verbs_scan(const char *filter, verbs_dev_info_t *out, unsigned max, unsigned *n_p,
                      char *why, size_t cap)
{
    int n = 0;

    *n_p = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL || n <= 0) {
        int err = errno;
        if (list == NULL && err != 0)
            snprintf(why, cap, "no RDMA device found (ibv_get_device_list listed none: %s%s)",
                     strerror(err),
                     err == ENOSYS ? "; the kernel has no RDMA support (ib_uverbs)" : "");
        else
            snprintf(why, cap, "no RDMA device found (ibv_get_device_list listed none)");
        if (list != NULL)
            ibv_free_device_list(list);
        return SX_ERR_NO_DEVICE;
    }
    unsigned k = 0;
    for (int i = 0; i < n && k < max; i++) {
        verbs_dev_info_t *d = &out[k++];
        memset(d, 0, sizeof(*d));
        snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(list[i]));
        d->listed = verbs_name_listed(filter, d->name);
        if (!d->listed)
            continue; /* not opened: SX_NET_DEVICES keeps us off it */
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (ctx == NULL) {
            snprintf(d->why, sizeof(d->why), "cannot open it: %s", strerror(errno));
            continue;
        }
        verbs_probe_ports(ctx, d);
        if (ibv_close_device(ctx) != 0)
            sx_debug("verbs", "closing %s after its query: %s", d->name, strerror(errno));
    }
    ibv_free_device_list(list);
    *n_p = k;
    return SX_OK;
}

/* Writes the names of the devices in @p d (all, or those SX_NET_DEVICES
 * lists) to @p buf. */
void sx_verbs_names(const verbs_dev_info_t *d, unsigned n, bool listed_only, char *buf, size_t cap)
{
    size_t off = 0;

    buf[0] = '\0';
    for (unsigned i = 0; i < n && off < cap; i++) {
        if (!listed_only || d[i].listed)
            off += (size_t)snprintf(buf + off, cap - off, "%s%s", off ? ", " : "", d[i].name);
    }
}

/*
 * Scans and judges: SX_OK with the devices in @p d (*n_p of them), or
 * SX_ERR_NO_DEVICE with the reason in @p why: none at all, none that
 * SX_NET_DEVICES allows, or none of those with an ACTIVE port.
 */
int sx_verbs_find(const sx_tl_config_t *config, verbs_dev_info_t *d, unsigned *n_p, char *why,
                  size_t cap)
{
    const char *filter = config != NULL ? config->net_devices : NULL;
    unsigned n = 0, listed = 0, usable = 0;
    int rc = verbs_scan(filter, d, VERBS_DEVS_MAX, &n, why, cap);

    *n_p = n;
    if (rc != SX_OK)
        return rc;
    for (unsigned i = 0; i < n; i++) {
        listed += d[i].listed;
        usable += d[i].listed && d[i].port != 0;
    }
    if (listed == 0) {
        char found[128];
        sx_verbs_names(d, n, false, found, sizeof(found));
        snprintf(why, cap, "SX_NET_DEVICES='%s' names none of the RDMA devices found: %s", filter,
                 found);
        return SX_ERR_NO_DEVICE;
    }
    if (usable == 0) {
        size_t off = (size_t)snprintf(why, cap, "no RDMA device has an ACTIVE port:");
        for (unsigned i = 0; i < n && off < cap; i++) {
            if (d[i].listed)
                off += (size_t)snprintf(why + off, cap - off, " %s (%s)", d[i].name, d[i].why);
        }
        return SX_ERR_NO_DEVICE;
    }
    return SX_OK;
}

int sx_verbs_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q)
{
    verbs_dev_info_t d[VERBS_DEVS_MAX];
    unsigned n = 0;

    (void)named; /* discovery is cheap: one scan of sysfs when there is no device */
    q->exclusivity = SX_TL_EXCL_HW;
    int rc = sx_verbs_find(config, d, &n, q->detail, sizeof(q->detail));
    if (rc != SX_OK) {
        /* Once per process: the engine's debug line repeats it per query. */
        if (!atomic_flag_test_and_set(&verbs_absent_logged))
            sx_info("verbs", "the verbs transport is not used: %s", q->detail);
        return rc;
    }
    size_t off = 0;
    for (unsigned i = 0; i < n && off < sizeof(q->detail); i++) {
        if (!d[i].listed || d[i].port == 0)
            continue;
        off += (size_t)snprintf(q->detail + off, sizeof(q->detail) - off, "%s%s port %u %s mtu %zu",
                                off ? ", " : "", d[i].name, (unsigned)d[i].port,
                                sx_verbs_link_name(d[i].link_layer), d[i].mtu);
    }
    return SX_OK;
}

int sx_verbs_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max)
{
    verbs_dev_info_t d[VERBS_DEVS_MAX];
    char why[SX_TL_DETAIL_MAX];
    unsigned n = 0, k = 0;

    if (names == NULL)
        return 0;
    if (sx_verbs_find(config, d, &n, why, sizeof(why)) != SX_OK) {
        /* Said by the query already, or, should a device vanish between
         * query and this call, by the open that follows. */
        sx_debug("verbs", "no device to list: %s", why);
        return 0;
    }
    for (unsigned i = 0; i < n && k < max; i++) {
        if (!d[i].listed || d[i].port == 0)
            continue;
        /* Both are SX_TL_DEVICE_MAX bytes, NUL terminated. */
        size_t len = strnlen(d[i].name, SX_TL_DEVICE_MAX - 1);
        memcpy(names[k], d[i].name, len);
        names[k++][len] = '\0';
    }
    return (int)k;
}
