/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Topology: which cores this process may run on, and their NUMA nodes.
 *
 * Read once at engine creation with hwloc. The library only reads the
 * process's binding; it never changes any thread's affinity.
 */
#ifndef SX_ENGINE_TOPO_H
#define SX_ENGINE_TOPO_H

#include <hwloc.h>

typedef struct sx_topo_core {
    int logical;           /* hwloc logical index of the core (or PU in the fallback) */
    int first_pu;          /* OS index of its first PU inside the process cpuset */
    int numa_node;         /* hwloc logical index of the NUMA node, -1 if unknown */
    hwloc_bitmap_t cpuset; /* the core's PUs that the process may use */
} sx_topo_core_t;

typedef struct sx_topo {
    hwloc_topology_t topology;
    hwloc_bitmap_t process_set; /* the creating thread's CPU binding */
    sx_topo_core_t *cores;
    unsigned ncores;
    unsigned nnuma;
    int used_pu_fallback; /* the topology had no core objects: one "core" per PU */
} sx_topo_t;

/** Discovers the topology. Returns SX_OK or SX_ERR_TOPOLOGY / SX_ERR_NO_MEMORY. */
int sx_topo_init(sx_topo_t *topo);
void sx_topo_fini(sx_topo_t *topo);

/** Index into topo->cores of the core holding OS PU @p pu, or -1. */
int sx_topo_core_of_pu(const sx_topo_t *topo, int pu);

#endif /* SX_ENGINE_TOPO_H */
