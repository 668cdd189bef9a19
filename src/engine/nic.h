/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NIC locality: which of a transport's devices each shard uses.
 *
 * A device is found among hwloc's OS devices by name: verbs device names
 * ("mlx5_0") are OpenFabrics OS devices, interface names ("eth0") are
 * network OS devices. Its locality is the cpuset of its first non-I/O
 * ancestor (the package or NUMA-level group its PCI bus hangs off), and
 * its NUMA node the one NUMA node that cpuset touches. A name hwloc does
 * not know (lo, veth, a bridge: nothing on a PCI bus) has no locality.
 *
 * Loading I/O objects makes hwloc walk sysfs's PCI and class trees, which
 * on the 2-core VM this was written on took a topology load from 2.2 ms
 * to 9.7 ms (best of 6 each, hwloc 2.9), and engine creation from about
 * 3.5 ms to 11 ms. So the engine's own topology (topo.h) stays without
 * I/O, and the engine loads one with I/O (sx_nic_topology_load) only when
 * its network transport has devices to choose among.
 *
 * Pure: hwloc and libc only, no logging and no engine state, so that unit
 * tests can run it over XML topologies and sx_info can link it beside the
 * shared library. Callers log what the status codes mean.
 */
#ifndef SX_ENGINE_NIC_H
#define SX_ENGINE_NIC_H

#include <hwloc.h>

#define SX_NIC_NAME_MAX 64 /* bytes of a device name, with the NUL */

typedef struct sx_nic {
    char name[SX_NIC_NAME_MAX];
    /* HWLOC_OBJ_OSDEV_NETWORK or HWLOC_OBJ_OSDEV_OPENFABRICS as hwloc
     * reports it; -1 when hwloc does not know the name. */
    int osdev_type;
    /* The cores near it; NULL when its locality is unknown. Owned. */
    hwloc_bitmap_t cpuset;
    /* hwloc logical index of its NUMA node; -1 when the locality is
     * unknown or touches several NUMA nodes (a device that hangs off the
     * machine as a whole, as in most virtual machines with several). */
    int numa_node;
    /* Logical indexes of the NUMA nodes its locality touches, as a list
     * ("0", "0-1"); "" when unknown. */
    char numa_nodes[32];
    /* Shards sx_nic_assign gave it. */
    unsigned shards;
} sx_nic_t;

/** The choice kept per shard: the device's name ("" = none) and its
 *  NUMA node (-1 unknown). */
typedef struct sx_nic_choice {
    char name[SX_NIC_NAME_MAX];
    int numa_node;
} sx_nic_choice_t;

/**
 * Loads a topology with its PCI and OS devices: this machine's when
 * @p xml is NULL, else the NUL-terminated hwloc 2 XML @p xml (tests).
 * SX_OK with *topology_p set (hwloc_topology_destroy it), or
 * SX_ERR_TOPOLOGY. Blocks for the discovery (milliseconds).
 */
int sx_nic_topology_load(const char *xml, hwloc_topology_t *topology_p);

/**
 * Fills @p nic for the device called @p name: type, locality and NUMA
 * node from @p topology (loaded with I/O; NULL: every locality unknown),
 * shards = 0. SX_OK (an unknown name is not an error: its locality is
 * unknown), SX_ERR_INVALID_PARAM for a name too long, SX_ERR_NO_MEMORY.
 * Release with sx_nic_release.
 */
int sx_nic_locate(hwloc_topology_t topology, const char *name, sx_nic_t *nic);

/**
 * Lists the network and OpenFabrics OS devices of @p topology, located,
 * into @p nics (at most @p max); returns how many there are (which may
 * exceed @p max: only the first @p max are filled), or SX_ERR_NO_MEMORY
 * with none left to release.
 */
int sx_nic_list(hwloc_topology_t topology, sx_nic_t *nics, unsigned max);

/**
 * Gives each of @p nshards shards a device among @p nics: choice[s] is
 * an index into @p nics. Shard s runs on the cores of shard_sets[s]. See
 * nic.c for the rule. Counts the shards of each device in nics[].shards.
 * @p topology supplies the NUMA nodes (NULL: the cores alone decide).
 * SX_OK, SX_ERR_INVALID_PARAM when @p nnics is 0, SX_ERR_NO_MEMORY.
 */
int sx_nic_assign(hwloc_topology_t topology, sx_nic_t *nics, unsigned nnics,
                  const hwloc_const_bitmap_t *shard_sets, unsigned nshards, unsigned *choice);

/** Frees what sx_nic_locate and sx_nic_list allocated in @p n entries. */
void sx_nic_release(sx_nic_t *nics, unsigned n);

/** "network", "openfabrics" or "unknown" for nic->osdev_type. */
const char *sx_nic_type_name(int osdev_type);

#endif /* SX_ENGINE_NIC_H */
