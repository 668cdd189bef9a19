/* SPDX-License-Identifier: BSD-3-Clause */
/* NIC locality with hwloc; see nic.h. */
#include "engine/nic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

/*
 * Discovery components a NIC's locality does not need. The GPU ones
 * (OpenCL, CUDA, NVML, ROCm SMI, Level Zero, GL) initialise their
 * runtimes, which on a GPU node can take far longer than the rest. pci
 * reads PCI devices through libpciaccess, which leaks about 1 KiB per
 * topology load (LeakSanitizer, libpciaccess 0.17 with hwloc 2.9); on Linux, hwloc's own
 * backend finds the same devices in sysfs without it. A name this hwloc
 * does not know is harmless: there is nothing to keep out.
 */
static const char *const sx_nic_skipped_components[] = {
    "pci", "opencl", "cuda", "nvml", "rsmi", "levelzero", "gl",
};
#define SX_NIC_NSKIPPED (sizeof(sx_nic_skipped_components) / sizeof(sx_nic_skipped_components[0]))

int sx_nic_topology_load(const char *xml, hwloc_topology_t *topology_p)
{
    hwloc_topology_t t;

    if (hwloc_topology_init(&t) != 0)
        return SX_ERR_TOPOLOGY;
    for (size_t i = 0; xml == NULL && i < SX_NIC_NSKIPPED; i++)
        (void)hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                            sx_nic_skipped_components[i]);
    /* KEEP_IMPORTANT keeps the PCI devices of the classes that matter
     * (network, InfiniBand, GPUs) with the bridges above them, and the OS
     * devices under them; enough to place a NIC, cheaper than every PCI
     * function of the machine. */
    if (hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
        (xml != NULL && hwloc_topology_set_xmlbuffer(t, xml, (int)strlen(xml) + 1) != 0) ||
        hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return SX_ERR_TOPOLOGY;
    }
    *topology_p = t;
    return SX_OK;
}

const char *sx_nic_type_name(int osdev_type)
{
    switch (osdev_type) {
    case HWLOC_OBJ_OSDEV_NETWORK:
        return "network";
    case HWLOC_OBJ_OSDEV_OPENFABRICS:
        return "openfabrics";
    default:
        return "unknown";
    }
}

static int sx_nic_is_netdev(hwloc_obj_t obj)
{
    return obj->name != NULL && (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
                                 obj->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS);
}

/* Fills @p nic from hwloc's OS device @p obj (NULL: not known to hwloc). */
static int sx_nic_fill(hwloc_topology_t t, hwloc_obj_t obj, const char *name, sx_nic_t *nic)
{
    memset(nic, 0, sizeof(*nic));
    if (strlen(name) >= sizeof(nic->name))
        return SX_ERR_INVALID_PARAM;
    snprintf(nic->name, sizeof(nic->name), "%s", name);
    nic->osdev_type = -1;
    nic->numa_node = -1;
    if (obj == NULL)
        return SX_OK;
    nic->osdev_type = (int)obj->attr->osdev.type;
    /* An I/O object has no cpuset of its own; the first ordinary object
     * above it (a package, a NUMA-level group, the machine) says which
     * cores its bus is attached to. */
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, obj);
    if (anc == NULL || anc->cpuset == NULL || hwloc_bitmap_iszero(anc->cpuset))
        return SX_OK;
    nic->cpuset = hwloc_bitmap_dup(anc->cpuset);
    hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
    if (nic->cpuset == NULL || nodes == NULL) {
        hwloc_bitmap_free(nic->cpuset);
        hwloc_bitmap_free(nodes);
        nic->cpuset = NULL;
        return SX_ERR_NO_MEMORY;
    }
    /* In hwloc 2 NUMA nodes are memory children, not ancestors, so they
     * are found by cpuset, as topo.c does for cores. */
    hwloc_obj_t node = NULL;
    while ((node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        if (node->cpuset != NULL && hwloc_bitmap_intersects(node->cpuset, nic->cpuset))
            hwloc_bitmap_set(nodes, node->logical_index);
    }
    if (hwloc_bitmap_weight(nodes) == 1)
        nic->numa_node = hwloc_bitmap_first(nodes);
    if (!hwloc_bitmap_iszero(nodes))
        hwloc_bitmap_list_snprintf(nic->numa_nodes, sizeof(nic->numa_nodes), nodes);
    hwloc_bitmap_free(nodes);
    return SX_OK;
}

int sx_nic_locate(hwloc_topology_t topology, const char *name, sx_nic_t *nic)
{
    hwloc_obj_t obj = NULL;

    /* A verbs device and a network interface may sit on the same PCI
     * function (mlx5_0 and its ib0): either name finds that function. */
    while (topology != NULL && (obj = hwloc_get_next_osdev(topology, obj)) != NULL) {
        if (sx_nic_is_netdev(obj) && strcmp(obj->name, name) == 0)
            break;
    }
    return sx_nic_fill(topology, obj, name, nic);
}

int sx_nic_list(hwloc_topology_t topology, sx_nic_t *nics, unsigned max)
{
    hwloc_obj_t obj = NULL;
    unsigned n = 0;

    while ((obj = hwloc_get_next_osdev(topology, obj)) != NULL) {
        /* A name longer than ours is not one a transport could list. */
        if (!sx_nic_is_netdev(obj) || strlen(obj->name) >= SX_NIC_NAME_MAX)
            continue;
        if (n < max) {
            int rc = sx_nic_fill(topology, obj, obj->name, &nics[n]);
            if (rc != SX_OK) {
                sx_nic_release(nics, n);
                return rc;
            }
        }
        n++;
    }
    return (int)n;
}

/*
 * The cores a shard counts as near: those of the NUMA nodes its own cores
 * belong to, or its cores alone when the topology has no NUMA node there.
 * A NIC attached anywhere within the shard's NUMA node is as near as one
 * attached next to its core: the cost is crossing the interconnect
 * between nodes, not the distance within one.
 */
static void sx_nic_near_region(hwloc_topology_t t, hwloc_const_bitmap_t cores,
                               hwloc_bitmap_t region)
{
    hwloc_obj_t node = NULL;

    hwloc_bitmap_zero(region);
    while (t != NULL && (node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        if (node->cpuset != NULL && hwloc_bitmap_intersects(node->cpuset, cores))
            hwloc_bitmap_or(region, region, node->cpuset);
    }
    if (hwloc_bitmap_iszero(region))
        hwloc_bitmap_copy(region, cores);
}

/*
 * The rule is Open MPI's usnic BTL's, the design shardx starts from
 * (shared/seeds/usnic_btl_README.txt describes that BTL; the NIC choice
 * itself lives in its hwloc code, which the README does not cover): a
 * process bound to cores uses the NICs nearest its NUMA node, and only
 * when none is near, or nothing is known of where they are, does it
 * consider all of them. usnic decides once per process and then uses
 * every NIC it kept; a shard here opens one interface, so the rule runs
 * once per shard, and among equally good NICs each shard takes the one
 * that has the fewest shards so far (the first listed on a tie). Shards
 * on one NUMA node thereby spread over that node's NICs, and shards with
 * no near NIC spread over all of them, counting the shards others
 * already put there.
 */
int sx_nic_assign(hwloc_topology_t topology, sx_nic_t *nics, unsigned nnics,
                  const hwloc_const_bitmap_t *shard_sets, unsigned nshards, unsigned *choice)
{
    if (nnics == 0)
        return SX_ERR_INVALID_PARAM;
    hwloc_bitmap_t region = hwloc_bitmap_alloc();
    if (region == NULL)
        return SX_ERR_NO_MEMORY;
    for (unsigned d = 0; d < nnics; d++)
        nics[d].shards = 0;
    for (unsigned s = 0; s < nshards; s++) {
        sx_nic_near_region(topology, shard_sets[s], region);
        int any_near = 0;
        for (unsigned d = 0; d < nnics && !any_near; d++)
            any_near = nics[d].cpuset != NULL && hwloc_bitmap_intersects(nics[d].cpuset, region);
        unsigned best = nnics;
        for (unsigned d = 0; d < nnics; d++) {
            int near = nics[d].cpuset != NULL && hwloc_bitmap_intersects(nics[d].cpuset, region);
            if (any_near && !near)
                continue;
            if (best == nnics || nics[d].shards < nics[best].shards)
                best = d;
        }
        choice[s] = best;
        nics[best].shards++;
    }
    hwloc_bitmap_free(region);
    return SX_OK;
}

void sx_nic_release(sx_nic_t *nics, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        hwloc_bitmap_free(nics[i].cpuset);
        nics[i].cpuset = NULL;
    }
}
