/* SPDX-License-Identifier: BSD-3-Clause */
/* Topology discovery with hwloc; see topo.h. */
#include "engine/topo.h"

#include <shardx.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static int sx_topo_numa_of(hwloc_topology_t t, hwloc_const_bitmap_t set)
{
    hwloc_obj_t node = NULL;

    /* In hwloc 2 NUMA nodes hang off the tree as memory children, so look
     * them up by cpuset rather than by walking parents. */
    while ((node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        if (node->cpuset != NULL && hwloc_bitmap_intersects(node->cpuset, set))
            return (int)node->logical_index;
    }
    return -1;
}

static int sx_topo_collect(sx_topo_t *topo, hwloc_obj_type_t type)
{
    hwloc_topology_t t = topo->topology;
    int n = hwloc_get_nbobjs_by_type(t, type);

    if (n <= 0)
        return 0;
    topo->cores = calloc((size_t)n, sizeof(*topo->cores));
    if (topo->cores == NULL)
        return SX_ERR_NO_MEMORY;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(t, type, (unsigned)i);
        if (obj == NULL || obj->cpuset == NULL ||
            !hwloc_bitmap_intersects(obj->cpuset, topo->process_set))
            continue;
        sx_topo_core_t *c = &topo->cores[topo->ncores];
        c->cpuset = hwloc_bitmap_alloc();
        if (c->cpuset == NULL)
            return SX_ERR_NO_MEMORY;
        hwloc_bitmap_and(c->cpuset, obj->cpuset, topo->process_set);
        c->logical = (int)obj->logical_index;
        c->first_pu = hwloc_bitmap_first(c->cpuset);
        c->numa_node = sx_topo_numa_of(t, c->cpuset);
        topo->ncores++;
    }
    return SX_OK;
}

int sx_topo_init(sx_topo_t *topo)
{
    int rc;

    memset(topo, 0, sizeof(*topo));
    if (hwloc_topology_init(&topo->topology) != 0)
        return SX_ERR_TOPOLOGY;
    if (hwloc_topology_load(topo->topology) != 0) {
        sx_error("topo", "hwloc could not load the machine topology");
        hwloc_topology_destroy(topo->topology);
        topo->topology = NULL;
        return SX_ERR_TOPOLOGY;
    }
    topo->process_set = hwloc_bitmap_alloc();
    if (topo->process_set == NULL) {
        sx_topo_fini(topo);
        return SX_ERR_NO_MEMORY;
    }
    /* The creating thread's binding, not HWLOC_CPUBIND_PROCESS: on Linux
     * the latter is the union over every thread, including helper threads
     * of libraries (liburcu's workers among them) that keep whatever
     * affinity they started with. A launcher binds the whole process, so
     * the creating thread normally carries the process's cpuset. */
    if (hwloc_get_cpubind(topo->topology, topo->process_set, HWLOC_CPUBIND_THREAD) != 0 ||
        hwloc_bitmap_iszero(topo->process_set)) {
        /* Some containers refuse the query; everything we are allowed to use
         * is the next best answer. */
        sx_debug("topo", "process binding unavailable; using the allowed cpuset");
        hwloc_bitmap_copy(topo->process_set, hwloc_topology_get_allowed_cpuset(topo->topology));
    }

    rc = sx_topo_collect(topo, HWLOC_OBJ_CORE);
    if (rc == SX_OK && topo->ncores == 0) {
        /* Virtual machines sometimes report PUs without cores. */
        free(topo->cores);
        topo->cores = NULL;
        topo->used_pu_fallback = 1;
        rc = sx_topo_collect(topo, HWLOC_OBJ_PU);
    }
    if (rc != SX_OK || topo->ncores == 0) {
        sx_error("topo", "no usable core in the process's cpuset");
        sx_topo_fini(topo);
        return rc != SX_OK ? rc : SX_ERR_TOPOLOGY;
    }
    int nnuma = hwloc_get_nbobjs_by_type(topo->topology, HWLOC_OBJ_NUMANODE);
    topo->nnuma = nnuma > 0 ? (unsigned)nnuma : 0;
    return SX_OK;
}

void sx_topo_fini(sx_topo_t *topo)
{
    if (topo->cores != NULL) {
        for (unsigned i = 0; i < topo->ncores; i++)
            hwloc_bitmap_free(topo->cores[i].cpuset);
        free(topo->cores);
    }
    if (topo->process_set != NULL)
        hwloc_bitmap_free(topo->process_set);
    if (topo->topology != NULL)
        hwloc_topology_destroy(topo->topology);
    memset(topo, 0, sizeof(*topo));
}

int sx_topo_core_of_pu(const sx_topo_t *topo, int pu)
{
    if (pu < 0)
        return -1;
    for (unsigned i = 0; i < topo->ncores; i++) {
        if (hwloc_bitmap_isset(topo->cores[i].cpuset, (unsigned)pu))
            return (int)i;
    }
    return -1;
}
