/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NIC locality (src/engine/nic.c, SX_NET_DEVICES):
 *
 *  - the assignment rule over hwloc topologies written here as XML (two
 *    NUMA nodes of two cores each, NICs on PCI buses under either package
 *    or under the machine): shards take the NICs of their own NUMA node,
 *    spread over equally near ones, and share unknown or far ones
 *    round-robin; the SX_NET_DEVICES list syntax;
 *  - on this machine: udp with SX_NET_DEVICES=lo binds to lo's address
 *    instead of SX_BIND_ADDR and sx_engine_shard_info says so; a name that
 *    is not an interface fails engine creation with SX_ERR_NO_DEVICE; the
 *    same over ofi on libfabric's udp provider, whose domains are the
 *    interfaces (built where libfabric was found);
 *  - in two network namespaces of our own joined by two veth pairs: two
 *    engines with SX_NET_DEVICES=vethA,vethB put shard 0 on one pair and
 *    shard 1 on the other, and their messages cross both (the veths'
 *    packet counters say so). Skipped, with the reason, where `ip netns
 *    add` is not permitted (it needs root or CAP_NET_ADMIN and
 *    CAP_SYS_ADMIN).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hwloc.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shardx.h>

#include "am_util.h"
#include "test_filter.h"
#include "build_config.h"
#include "common/namelist.h"
#include "engine/engine.h"
#include "shard/shard.h"
#include "engine/nic.h"
#include "log_capture.h"

/* ---------------------------------------------------------------- XML topologies */

/*
 * One PCI function with a NIC on it: its OpenFabrics name (a verbs
 * device) and its network interface name, either may be NULL, and where
 * its bus hangs: under package 0 or 1 (whose NUMA node is 0 or 1), or
 * under the machine (-1), as in virtual machines.
 */
typedef struct pci_nic {
    int package;
    const char *ofa;
    const char *net;
} pci_nic_t;

#define XML_CAP 16384

/* Appends to the XML being built; the buffer is large enough for every
 * topology below, which the assertion keeps honest. */
static void xml_add(char *buf, size_t *off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, XML_CAP - *off, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < XML_CAP - *off);
    *off += (size_t)n;
}

static void xml_sets(char *buf, size_t *off, unsigned cpus, unsigned nodes)
{
    xml_add(buf, off,
            " cpuset=\"0x%08x\" complete_cpuset=\"0x%08x\" nodeset=\"0x%08x\" "
            "complete_nodeset=\"0x%08x\"",
            cpus, cpus, nodes, nodes);
}

static void xml_pci(char *buf, size_t *off, unsigned *gp, const pci_nic_t *nic, unsigned bus)
{
    xml_add(buf, off,
            "<object type=\"Bridge\" gp_index=\"%u\" bridge_type=\"0-1\" depth=\"0\" "
            "bridge_pci=\"0000:[%02x-%02x]\">\n",
            (*gp)++, bus, bus);
    /* Class 0207 is InfiniBand, 0200 Ethernet: both are kept by hwloc's
     * "important" I/O filter, as the engine loads it. */
    xml_add(buf, off,
            "<object type=\"PCIDev\" gp_index=\"%u\" pci_busid=\"0000:%02x:00.0\" "
            "pci_type=\"%s [15b3:1017] [15b3:0020] 00\" pci_link_speed=\"0.000000\">\n",
            (*gp)++, bus, nic->ofa != NULL ? "0207" : "0200");
    if (nic->ofa != NULL)
        xml_add(buf, off, "<object type=\"OSDev\" gp_index=\"%u\" name=\"%s\" osdev_type=\"3\"/>\n",
                (*gp)++, nic->ofa);
    if (nic->net != NULL)
        xml_add(buf, off, "<object type=\"OSDev\" gp_index=\"%u\" name=\"%s\" osdev_type=\"2\"/>\n",
                (*gp)++, nic->net);
    xml_add(buf, off, "</object>\n</object>\n");
}

/*
 * Writes a hwloc 2 XML topology: a machine with two packages, each one
 * NUMA node (os index = package) and two cores of one PU (PUs 0-1 in
 * package 0, 2-3 in package 1), and @p nics on PCI buses of their own.
 */
static char *xml_topology(const pci_nic_t *nics, unsigned nnics)
{
    char *buf = malloc(XML_CAP);
    size_t off = 0;
    unsigned gp = 1;

    assert_non_null(buf);
    xml_add(buf, &off,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">\n"
            "<object type=\"Machine\" os_index=\"0\" gp_index=\"%u\"",
            gp++);
    xml_sets(buf, &off, 0xf, 0x3);
    xml_add(buf, &off, " allowed_cpuset=\"0x0000000f\" allowed_nodeset=\"0x00000003\">\n");
    for (unsigned p = 0; p < 2; p++) {
        xml_add(buf, &off, "<object type=\"Package\" os_index=\"%u\" gp_index=\"%u\"", p, gp++);
        xml_sets(buf, &off, 0x3u << (2 * p), 1u << p);
        xml_add(buf, &off, ">\n<object type=\"NUMANode\" os_index=\"%u\" gp_index=\"%u\"", p, gp++);
        xml_sets(buf, &off, 0x3u << (2 * p), 1u << p);
        xml_add(buf, &off, " local_memory=\"1073741824\"/>\n");
        for (unsigned c = 0; c < 2; c++) {
            unsigned pu = 2 * p + c;
            xml_add(buf, &off, "<object type=\"Core\" os_index=\"%u\" gp_index=\"%u\"", pu, gp++);
            xml_sets(buf, &off, 1u << pu, 1u << p);
            xml_add(buf, &off, ">\n<object type=\"PU\" os_index=\"%u\" gp_index=\"%u\"", pu, gp++);
            xml_sets(buf, &off, 1u << pu, 1u << p);
            xml_add(buf, &off, "/>\n</object>\n");
        }
        for (unsigned i = 0; i < nnics; i++) {
            if (nics[i].package == (int)p)
                xml_pci(buf, &off, &gp, &nics[i], i + 1);
        }
        xml_add(buf, &off, "</object>\n");
    }
    for (unsigned i = 0; i < nnics; i++) {
        if (nics[i].package < 0)
            xml_pci(buf, &off, &gp, &nics[i], i + 1);
    }
    xml_add(buf, &off, "</object>\n</topology>\n");
    return buf;
}

static hwloc_topology_t load_topology(const pci_nic_t *nics, unsigned nnics)
{
    char *xml = xml_topology(nics, nnics);
    hwloc_topology_t t = NULL;
    int rc = sx_nic_topology_load(xml, &t);
    if (rc != SX_OK)
        fail_msg("hwloc refused the test topology:\n%s", xml);
    free(xml);
    assert_int_equal(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), 4);
    assert_int_equal(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE), 2);
    return t;
}

/*
 * Locates @p names in @p t and assigns @p nshards shards, shard s on core
 * s % 4 as the engine lays them out (cores 0-1 on NUMA node 0, 2-3 on
 * node 1). Writes the chosen device index of each shard to @p choice.
 */
static void assign(hwloc_topology_t t, const char *const *names, unsigned nnames, unsigned nshards,
                   sx_nic_t *nics, unsigned *choice)
{
    hwloc_const_bitmap_t sets[16];

    assert_true(nshards <= 16);
    for (unsigned i = 0; i < nnames; i++)
        assert_int_equal(sx_nic_locate(t, names[i], &nics[i]), SX_OK);
    for (unsigned s = 0; s < nshards; s++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, s % 4);
        assert_non_null(core);
        sets[s] = core->cpuset;
    }
    assert_int_equal(sx_nic_assign(t, nics, nnames, sets, nshards, choice), SX_OK);
}

static void assert_choices(const unsigned *choice, const unsigned *want, unsigned n)
{
    for (unsigned s = 0; s < n; s++) {
        if (choice[s] != want[s])
            fail_msg("shard %u got device %u, expected %u", s, choice[s], want[s]);
    }
}

/* ---------------------------------------------------------------- the rule */

/* One NIC per NUMA node: each shard takes its own node's, by either of
 * the NIC's names, in whatever order the transport lists them. */
static void test_one_nic_per_numa_node(void **state)
{
    (void)state;
    const pci_nic_t pci[] = {{0, "mlx5_0", "eth0"}, {1, "mlx5_1", "eth1"}};
    hwloc_topology_t t = load_topology(pci, 2);
    sx_nic_t nics[2];
    unsigned choice[8];

    const char *const verbs[] = {"mlx5_0", "mlx5_1"};
    assign(t, verbs, 2, 4, nics, choice);
    assert_choices(choice, (const unsigned[]){0, 0, 1, 1}, 4);
    for (unsigned d = 0; d < 2; d++) {
        assert_int_equal(nics[d].osdev_type, HWLOC_OBJ_OSDEV_OPENFABRICS);
        assert_int_equal(nics[d].numa_node, (int)d);
        assert_string_equal(nics[d].numa_nodes, d == 0 ? "0" : "1");
        assert_int_equal(nics[d].shards, 2);
        assert_non_null(nics[d].cpuset);
    }
    sx_nic_release(nics, 2);

    const char *const netdevs[] = {"eth1", "eth0"};
    assign(t, netdevs, 2, 8, nics, choice);
    assert_choices(choice, (const unsigned[]){1, 1, 0, 0, 1, 1, 0, 0}, 8);
    assert_int_equal(nics[0].osdev_type, HWLOC_OBJ_OSDEV_NETWORK);
    assert_int_equal(nics[0].numa_node, 1);
    sx_nic_release(nics, 2);
    hwloc_topology_destroy(t);
}

/* Two NICs on node 0 only: node 0's shards alternate between them, and
 * node 1's shards, near neither, spread over both, counting what node 0
 * already put on each. */
static void test_two_nics_on_one_node(void **state)
{
    (void)state;
    const pci_nic_t pci[] = {{0, "mlx5_0", NULL}, {0, "mlx5_1", NULL}};
    hwloc_topology_t t = load_topology(pci, 2);
    const char *const names[] = {"mlx5_0", "mlx5_1"};
    sx_nic_t nics[2];
    unsigned choice[8];

    assign(t, names, 2, 4, nics, choice);
    assert_choices(choice, (const unsigned[]){0, 1, 0, 1}, 4);
    sx_nic_release(nics, 2);

    /* Two shards per core: shards 0, 1, 4, 5 on node 0, 2, 3, 6, 7 on 1. */
    assign(t, names, 2, 8, nics, choice);
    assert_choices(choice, (const unsigned[]){0, 1, 0, 1, 0, 1, 0, 1}, 8);
    assert_int_equal(nics[0].shards, 4);
    assert_int_equal(nics[1].shards, 4);
    assert_int_equal(nics[0].numa_node, 0);
    assert_int_equal(nics[1].numa_node, 0);
    sx_nic_release(nics, 2);
    hwloc_topology_destroy(t);
}

/* Devices hwloc does not know (lo, a veth: nothing on a PCI bus) have no
 * locality: shards share them round-robin, with or without a topology. */
static void test_unknown_locality_is_round_robin(void **state)
{
    (void)state;
    const pci_nic_t pci[] = {{0, "mlx5_0", "eth0"}};
    hwloc_topology_t t = load_topology(pci, 1);
    const char *const names[] = {"lo", "veth0", "vethB"};
    sx_nic_t nics[3];
    unsigned choice[8];

    assign(t, names, 3, 7, nics, choice);
    assert_choices(choice, (const unsigned[]){0, 1, 2, 0, 1, 2, 0}, 7);
    for (unsigned d = 0; d < 3; d++) {
        assert_int_equal(nics[d].osdev_type, -1);
        assert_null(nics[d].cpuset);
        assert_int_equal(nics[d].numa_node, -1);
        assert_string_equal(nics[d].numa_nodes, "");
    }
    sx_nic_release(nics, 3);

    /* No topology at all (hwloc failed to load I/O): the same. */
    hwloc_const_bitmap_t sets[4];
    for (unsigned s = 0; s < 4; s++)
        sets[s] = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, s)->cpuset;
    for (unsigned d = 0; d < 2; d++)
        assert_int_equal(sx_nic_locate(NULL, names[d], &nics[d]), SX_OK);
    assert_int_equal(sx_nic_assign(NULL, nics, 2, sets, 4, choice), SX_OK);
    assert_choices(choice, (const unsigned[]){0, 1, 0, 1}, 4);
    sx_nic_release(nics, 2);

    /* A known NIC beside unknown ones: node 0's shards keep to the known
     * one; node 1's, near none, spread over all three by count. */
    const char *const mixed[] = {"lo", "mlx5_0", "veth0"};
    assign(t, mixed, 3, 4, nics, choice);
    assert_choices(choice, (const unsigned[]){1, 1, 0, 2}, 4);
    sx_nic_release(nics, 3);
    hwloc_topology_destroy(t);
}

/* One device: every shard takes it, near or not. */
static void test_one_device_for_everyone(void **state)
{
    (void)state;
    const pci_nic_t pci[] = {{1, "mlx5_1", "ib1"}};
    hwloc_topology_t t = load_topology(pci, 1);
    sx_nic_t nics[1];
    unsigned choice[8];

    const char *const far[] = {"ib1"};
    assign(t, far, 1, 8, nics, choice);
    assert_choices(choice, (const unsigned[]){0, 0, 0, 0, 0, 0, 0, 0}, 8);
    assert_int_equal(nics[0].numa_node, 1);
    assert_int_equal(nics[0].shards, 8);
    sx_nic_release(nics, 1);

    const char *const unknown[] = {"lo"};
    assign(t, unknown, 1, 3, nics, choice);
    assert_choices(choice, (const unsigned[]){0, 0, 0}, 3);
    sx_nic_release(nics, 1);

    assert_int_equal(sx_nic_assign(t, nics, 0, NULL, 0, choice), SX_ERR_INVALID_PARAM);
    hwloc_topology_destroy(t);
}

/* A NIC whose bus hangs off the machine as a whole is near every NUMA
 * node (and belongs to none), so it is shared with each node's own. */
static void test_machine_level_nic(void **state)
{
    (void)state;
    const pci_nic_t pci[] = {{0, "mlx5_0", NULL}, {-1, NULL, "eth9"}};
    hwloc_topology_t t = load_topology(pci, 2);
    const char *const names[] = {"mlx5_0", "eth9"};
    sx_nic_t nics[2];
    unsigned choice[4];

    assign(t, names, 2, 4, nics, choice);
    assert_int_equal(nics[1].numa_node, -1);
    assert_string_equal(nics[1].numa_nodes, "0-1");
    assert_choices(choice, (const unsigned[]){0, 1, 1, 1}, 4);
    sx_nic_release(nics, 2);
    hwloc_topology_destroy(t);
}

/* sx_nic_list (sx_info's list) finds every network and OpenFabrics OS
 * device; SX_NET_DEVICES narrows what the shards choose among. */
static void test_list_and_net_devices_filter(void **state)
{
    (void)state;
    const pci_nic_t pci[] = {{0, "mlx5_0", "eth0"}, {1, "mlx5_1", "eth1"}};
    hwloc_topology_t t = load_topology(pci, 2);
    sx_nic_t all[8];

    assert_int_equal(sx_nic_list(t, NULL, 0), 4);
    assert_int_equal(sx_nic_list(t, all, 8), 4);
    unsigned ofa = 0, net = 0;
    for (unsigned i = 0; i < 4; i++) {
        ofa += all[i].osdev_type == HWLOC_OBJ_OSDEV_OPENFABRICS;
        net += all[i].osdev_type == HWLOC_OBJ_OSDEV_NETWORK;
        assert_int_equal(all[i].numa_node, all[i].name[strlen(all[i].name) - 1] - '0');
    }
    assert_int_equal(ofa, 2);
    assert_int_equal(net, 2);
    assert_string_equal(sx_nic_type_name(HWLOC_OBJ_OSDEV_OPENFABRICS), "openfabrics");
    assert_string_equal(sx_nic_type_name(-1), "unknown");

    /* SX_NET_DEVICES=mlx5_1,eth0: the devices a transport would list. */
    char names[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX], why[128];
    unsigned n = 0;
    assert_int_equal(sx_namelist_parse("mlx5_1,eth0", names, SX_NAMELIST_MAX, &n, why, sizeof(why)),
                     SX_OK);
    assert_int_equal(n, 2);
    const char *kept[4];
    unsigned nkept = 0;
    for (unsigned i = 0; i < 4; i++) {
        if (sx_namelist_find((const char(*)[SX_NAMELIST_NAME_MAX])names, n, all[i].name) >= 0)
            kept[nkept++] = all[i].name;
    }
    assert_int_equal(nkept, 2);
    sx_nic_t nics[2];
    unsigned choice[4];
    assign(t, kept, 2, 4, nics, choice);
    for (unsigned s = 0; s < 4; s++)
        assert_string_equal(nics[choice[s]].name, s < 2 ? "eth0" : "mlx5_1");
    sx_nic_release(nics, 2);

    /* Only mlx5_1 allowed: node 0's shards take it too. */
    assert_int_equal(sx_namelist_parse("mlx5_1", names, SX_NAMELIST_MAX, &n, why, sizeof(why)),
                     SX_OK);
    const char *only[] = {names[0]};
    assign(t, only, 1, 4, nics, choice);
    assert_choices(choice, (const unsigned[]){0, 0, 0, 0}, 4);
    sx_nic_release(nics, 1);
    sx_nic_release(all, 4);
    hwloc_topology_destroy(t);
}

/* The list's syntax: what is accepted, and each refusal says why. */
static void test_namelist_syntax(void **state)
{
    (void)state;
    char names[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX], why[128];
    unsigned n = 99;

    assert_int_equal(sx_namelist_parse(NULL, names, SX_NAMELIST_MAX, &n, why, sizeof(why)), SX_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sx_namelist_parse("", names, SX_NAMELIST_MAX, &n, why, sizeof(why)), SX_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sx_namelist_parse("mlx5_0,enp65s0f1np1,eth0:1,ib-0.a", names, SX_NAMELIST_MAX,
                                       &n, why, sizeof(why)),
                     SX_OK);
    assert_int_equal(n, 4);
    assert_string_equal(names[1], "enp65s0f1np1");
    assert_string_equal(names[2], "eth0:1");
    assert_int_equal(sx_namelist_find((const char(*)[SX_NAMELIST_NAME_MAX])names, n, "ib-0.a"), 3);
    assert_int_equal(sx_namelist_find((const char(*)[SX_NAMELIST_NAME_MAX])names, n, "ib"), -1);

    static const struct {
        const char *spec;
        const char *why;
    } bad[] = {
        {"a,,b", "empty name"},
        {",a", "empty name"},
        {"a,", "empty name"},
        {"mlx5_0, mlx5_1", "no white space"},
        {"eth0\t", "no white space"},
        {"^eth0", "exclusion"},
        {"eth0;ls", "';' in 'eth0;ls'"},
        {"eth0,eth0", "'eth0' is named twice"},
        {"a123456789012345678901234567890123456789012345678901234567890123", "longer than 63"},
        {"a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", "more than 16 names"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        n = 99;
        if (sx_namelist_parse(bad[i].spec, names, SX_NAMELIST_MAX, &n, why, sizeof(why)) !=
            SX_ERR_INVALID_PARAM)
            fail_msg("'%s' was accepted", bad[i].spec);
        if (strstr(why, bad[i].why) == NULL)
            fail_msg("'%s': expected \"%s\" in \"%s\"", bad[i].spec, bad[i].why, why);
        assert_int_equal(n, 99);
    }
    /* A shorter limit than the table's applies too. */
    assert_int_equal(sx_namelist_parse("a,b,c", names, 2, &n, why, sizeof(why)),
                     SX_ERR_INVALID_PARAM);
    assert_non_null(strstr(why, "more than 2 names"));
}

/* ---------------------------------------------------------------- engines here */

static sx_engine_h engine_with(const sx_config_kv_t *kv, size_t n, int expect)
{
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = n};
    sx_engine_h e = NULL;
    int rc = sx_engine_create(&params, &e);
    if (rc != expect)
        fail_msg("sx_engine_create: %s, expected %s", sx_strerror(rc), sx_strerror(expect));
    if (expect != SX_OK)
        assert_null(e);
    return e;
}

/* The IPv4 address shard @p i's network interface put in the card. */
static void shard_ip(sx_engine_h e, unsigned i, char *ip, size_t cap)
{
    sx_tl_iface_t *iface = e->shards[i]->ifaces[SX_SHARD_TL_NET];
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);

    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    if (strcmp(iface->ops->name, "ofi") == 0) {
        /* Format byte (FI_SOCKADDR_IN), port, IPv4 address: ofi.c. */
        assert_int_equal(len, 7);
        assert_non_null(inet_ntop(AF_INET, addr + 3, ip, (socklen_t)cap));
        return;
    }
    assert_string_equal(iface->ops->name, "udp");
    assert_true(len >= 8);
    assert_non_null(inet_ntop(AF_INET, addr + 4, ip, (socklen_t)cap));
}

typedef struct counter {
    uint64_t received;
    uint64_t completions;
    uint64_t errors;
} counter_t;

static void on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    counter_t *c = arg;
    (void)peer_id;
    (void)tag;
    (void)data;
    c->received += len == 32;
}

static void on_done(void *ctx, int status)
{
    counter_t *c = ctx;
    c->completions++;
    c->errors += status != SX_OK;
}

/*
 * Sends @p count messages from @p from to @p to on each lane, with the
 * calling thread's home shard equal to the lane on both sides, so shard
 * s of one engine talks to shard s of the other.
 */
static void exchange(sx_engine_h from, sx_engine_h to, sx_peer_h peer, unsigned lanes,
                     unsigned count)
{
    counter_t rx = {0}, tx = {0};
    uint8_t buf[32] = {0};

    assert_int_equal(sx_am_register(to, 9, on_am, &rx), SX_OK);
    for (unsigned lane = 0; lane < lanes; lane++) {
        assert_int_equal(sx_thread_bind(from, lane), SX_OK);
        assert_int_equal(sx_thread_bind(to, lane), SX_OK);
        for (unsigned i = 0; i < count; i++) {
            struct iovec iov = {buf, sizeof(buf)};
            sx_send_params_t sp = {.field_mask = SX_SEND_PARAM_LANE, .lane = lane};
            assert_int_equal(sx_send_ex(peer, 9, &iov, 1, &sp, on_done, &tx), SX_INPROGRESS);
        }
        assert_true(am_progress_until(from, to, &tx.completions, (uint64_t)(lane + 1) * count));
        assert_true(am_progress_until(from, to, &rx.received, (uint64_t)(lane + 1) * count));
    }
    assert_int_equal(tx.errors, 0);
    assert_int_equal(sx_am_register(to, 9, NULL, NULL), SX_OK);
}

/* SX_NET_DEVICES=lo: each shard binds lo's address, not SX_BIND_ADDR
 * (127.0.0.2 here, which would work too, so the override shows), and
 * sx_engine_shard_info names the device; traffic flows. Without the
 * list nothing changes. */
static void test_engine_lo(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {
        {"NET_DEVICES", "lo"}, {"BIND_ADDR", "127.0.0.2"}, {"SHARDS", "2"}};
    sx_engine_h a = engine_with(kv, 3, SX_OK);
    sx_engine_h b = engine_with(kv, 3, SX_OK);
    char ip[INET_ADDRSTRLEN];

    for (unsigned i = 0; i < 2; i++) {
        sx_shard_info_t info;
        assert_int_equal(sx_engine_shard_info(a, i, &info), SX_OK);
        assert_string_equal(info.device, "lo");
        assert_int_equal(info.device_numa_node, -1); /* lo is on no PCI bus */
        shard_ip(a, i, ip, sizeof(ip));
        assert_string_equal(ip, "127.0.0.1");
    }
    /* A receiver answers only peers it knows: both sides add each other. */
    sx_peer_h a_to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    exchange(a, b, a_to_b, 2, 20);
    sx_engine_destroy(a);
    sx_engine_destroy(b);

    sx_engine_h plain = engine_with(kv + 1, 2, SX_OK);
    for (unsigned i = 0; i < 2; i++) {
        sx_shard_info_t info;
        memset(&info, 0x55, sizeof(info));
        assert_int_equal(sx_engine_shard_info(plain, i, &info), SX_OK);
        assert_string_equal(info.device, "");
        assert_int_equal(info.device_numa_node, -1);
        shard_ip(plain, i, ip, sizeof(ip));
        assert_string_equal(ip, "127.0.0.2");
    }
    sx_engine_destroy(plain);
}

/* A name that is no interface here: SX_ERR_NO_DEVICE, naming it and the
 * interfaces there are. A malformed list: SX_ERR_INVALID_PARAM. */
static void test_engine_bad_devices(void **state)
{
    (void)state;
    const sx_config_kv_t missing[] = {{"NET_DEVICES", "lo,nosuchdev"}};
    capture_start();
    engine_with(missing, 1, SX_ERR_NO_DEVICE);
    char *log = capture_stop();
    assert_contains(log, "'nosuchdev', which is not a network interface here");
    assert_contains(log, "interfaces: lo");
    free(log);

    const sx_config_kv_t malformed[] = {{"NET_DEVICES", "lo,,eth0"}};
    capture_start();
    engine_with(malformed, 1, SX_ERR_INVALID_PARAM);
    log = capture_stop();
    assert_contains(log, "invalid value SX_NET_DEVICES='lo,,eth0': an empty name");
    free(log);
}

#if SX_HAVE_OFI
/* The same over the ofi transport on libfabric's udp provider, whose
 * domains are named after the interfaces: each shard opens domain lo and
 * binds its address, not SX_BIND_ADDR; traffic flows. */
static void test_engine_lo_ofi(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"TRANSPORTS", "ofi"},
                                 {"OFI_PROVIDER", "udp"},
                                 {"NET_DEVICES", "lo"},
                                 {"BIND_ADDR", "127.0.0.2"},
                                 {"SHARDS", "2"}};
    sx_engine_h a = engine_with(kv, 5, SX_OK);
    sx_engine_h b = engine_with(kv, 5, SX_OK);
    char ip[INET_ADDRSTRLEN];

    for (unsigned i = 0; i < 2; i++) {
        sx_shard_info_t info;
        assert_int_equal(sx_engine_shard_info(a, i, &info), SX_OK);
        assert_string_equal(info.device, "lo");
        assert_string_equal(a->shards[i]->ifaces[SX_SHARD_TL_NET]->ops->name, "ofi");
        shard_ip(a, i, ip, sizeof(ip));
        assert_string_equal(ip, "127.0.0.1");
    }
    sx_peer_h a_to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    exchange(a, b, a_to_b, 2, 20);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

/* A name that is no domain of the provider: SX_ERR_NO_DEVICE, naming it
 * and the domains there are; no warning that the list is ignored. */
static void test_engine_bad_devices_ofi(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {
        {"TRANSPORTS", "ofi"}, {"OFI_PROVIDER", "udp"}, {"NET_DEVICES", "lo,nosuchdev"}};
    capture_start();
    engine_with(kv, 3, SX_ERR_NO_DEVICE);
    char *log = capture_stop();
    assert_contains(log, "'nosuchdev', which is not a domain of libfabric provider udp here");
    assert_contains(log, "lo");
    assert_null(strstr(log, "is ignored"));
    free(log);
}
#endif

/* ---------------------------------------------------------------- network namespaces */

/*
 * Two namespaces of our own, A and B, joined by two veth pairs that are
 * both called vethA and vethB inside them:
 *
 *   ns A: vethA 10.77.1.1/24  <---->  ns B: vethA 10.77.1.2/24
 *         vethB 10.77.2.1/24  <---->        vethB 10.77.2.2/24
 *
 * Every address lives inside these namespaces only; nothing is sent
 * anywhere else. The names carry our pid, so parallel runs do not meet.
 */
typedef struct netns {
    bool ready;
    char why[640]; /* why the namespace tests are skipped */
    char a[32], b[32];
    bool made_a, made_b;
    int home_fd; /* our own network namespace, to come back to */
} netns_t;

static netns_t ns = {.home_fd = -1};

/* Runs a command (our own words only, never outside input) and keeps the
 * first line of its output in @p out; returns its exit status. */
static int run(char *out, size_t cap, const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    char line[256] = "";
    if (out != NULL && cap > 0)
        out[0] = '\0';
    while (fgets(line, sizeof(line), p) != NULL) {
        if (out != NULL && out[0] == '\0') {
            line[strcspn(line, "\n")] = '\0';
            snprintf(out, cap, "%s", line);
        }
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void netns_cleanup(void)
{
    if (ns.made_a && run(NULL, 0, "ip netns del %s", ns.a) == 0)
        ns.made_a = false;
    if (ns.made_b && run(NULL, 0, "ip netns del %s", ns.b) == 0)
        ns.made_b = false;
    if (ns.home_fd >= 0) {
        close(ns.home_fd);
        ns.home_fd = -1;
    }
}

static int netns_setup(void **state)
{
    char out[256];
    (void)state;

    snprintf(ns.a, sizeof(ns.a), "sxnic%da", (int)getpid());
    snprintf(ns.b, sizeof(ns.b), "sxnic%db", (int)getpid());
    if (run(out, sizeof(out), "command -v ip") != 0) {
        snprintf(ns.why, sizeof(ns.why),
                 "the ip command (iproute2) is missing; scripts/install-deps.sh installs it");
        return 0;
    }
    atexit(netns_cleanup);
    if (run(out, sizeof(out), "ip netns add %s", ns.a) != 0) {
        snprintf(ns.why, sizeof(ns.why),
                 "'ip netns add' is not permitted here (needs root, or CAP_NET_ADMIN and "
                 "CAP_SYS_ADMIN): %s",
                 out);
        return 0;
    }
    ns.made_a = true;
    if (run(out, sizeof(out), "ip netns add %s", ns.b) != 0) {
        snprintf(ns.why, sizeof(ns.why), "a second 'ip netns add' failed: %s", out);
        return 0;
    }
    ns.made_b = true;
    static const char *const steps[] = {
        "ip -n %1$s link add vethA type veth peer name vethA netns %2$s",
        "ip -n %1$s link add vethB type veth peer name vethB netns %2$s",
        "ip -n %1$s addr add 10.77.1.1/24 dev vethA",
        "ip -n %1$s addr add 10.77.2.1/24 dev vethB",
        "ip -n %2$s addr add 10.77.1.2/24 dev vethA",
        "ip -n %2$s addr add 10.77.2.2/24 dev vethB",
        "ip -n %1$s link set vethA up",
        "ip -n %1$s link set vethB up",
        "ip -n %2$s link set vethA up",
        "ip -n %2$s link set vethB up",
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), steps[i], ns.a, ns.b);
        if (run(out, sizeof(out), "%s", cmd) != 0) {
            snprintf(ns.why, sizeof(ns.why), "'%s' failed: %s", cmd, out);
            return 0;
        }
    }
    ns.home_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (ns.home_fd < 0) {
        snprintf(ns.why, sizeof(ns.why), "cannot open our own network namespace: %s",
                 strerror(errno));
        return 0;
    }
    ns.ready = true;
    return 0;
}

static int netns_teardown(void **state)
{
    (void)state;
    netns_cleanup();
    return 0;
}

/* Skips the calling test, saying why, unless the namespaces are there. */
static bool netns_skip(void)
{
    if (ns.ready)
        return false;
    print_message("[  SKIPPED ] network namespace test: %s\n", ns.why);
    return true;
}

/* Moves the calling thread into namespace @p name, or home when NULL.
 * Sockets keep the namespace they were created in, so an engine created
 * inside one stays there after we leave. */
static void netns_enter(const char *name)
{
    int fd = ns.home_fd;
    if (name != NULL) {
        char path[128];
        snprintf(path, sizeof(path), "/var/run/netns/%s", name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            fail_msg("open %s: %s", path, strerror(errno));
    }
    int rc = setns(fd, CLONE_NEWNET);
    int err = errno;
    if (name != NULL)
        close(fd);
    if (rc != 0)
        fail_msg("setns into %s: %s", name != NULL ? name : "our own namespace", strerror(err));
}

/* Creates an engine inside namespace @p name (the thread comes home
 * whatever happens, so a failure cannot strand later tests there). */
static sx_engine_h engine_in(const char *name, const sx_config_kv_t *kv, size_t n, int *rc_p)
{
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = n};
    sx_engine_h e = NULL;

    netns_enter(name);
    *rc_p = sx_engine_create(&params, &e);
    netns_enter(NULL);
    return e;
}

/* Datagrams shard @p i's network interface sent (@p tx) or received. Its
 * counters are the token holder's (shard.c, sx_shard_mirror_tl_stats),
 * and the engine's service thread polls the shard between our calls:
 * read them as a pass would, holding the token. */
static uint64_t shard_datagrams(sx_engine_h e, unsigned i, bool tx)
{
    sx_shard_t *s = e->shards[i];

    while (!sx_delegate_enter(&s->token, &s->inbox, s, NULL))
        sched_yield();
    const sx_tl_iface_t *iface = s->ifaces[SX_SHARD_TL_NET];
    uint64_t n = tx ? iface->stats.tx_datagrams : iface->stats.rx_datagrams;
    (void)sx_delegate_leave_locked(&s->token, &s->inbox, s);
    return n;
}

static unsigned long long veth_counter(const char *nsname, const char *dev, const char *what)
{
    char out[64];
    assert_int_equal(run(out, sizeof(out), "ip netns exec %s cat /sys/class/net/%s/statistics/%s",
                         nsname, dev, what),
                     0);
    return strtoull(out, NULL, 10);
}

/* Two engines of two shards, each with SX_NET_DEVICES=vethA,vethB: shard
 * 0 binds vethA's address and shard 1 vethB's, and messages in both
 * directions on both lanes cross both veth pairs. */
static void test_netns_two_veths(void **state)
{
    (void)state;
    if (netns_skip()) {
        skip();
        return;
    }
    const sx_config_kv_t kv[] = {{"NET_DEVICES", "vethA,vethB"}, {"SHARDS", "2"}};
    int rc_a, rc_b;
    sx_engine_h a = engine_in(ns.a, kv, 2, &rc_a);
    sx_engine_h b = engine_in(ns.b, kv, 2, &rc_b);
    assert_int_equal(rc_a, SX_OK);
    assert_int_equal(rc_b, SX_OK);

    static const char *const dev[] = {"vethA", "vethB"};
    static const char *const ip_a[] = {"10.77.1.1", "10.77.2.1"};
    static const char *const ip_b[] = {"10.77.1.2", "10.77.2.2"};
    char ip[INET_ADDRSTRLEN];
    for (unsigned i = 0; i < 2; i++) {
        sx_shard_info_t info;
        assert_int_equal(sx_engine_shard_info(a, i, &info), SX_OK);
        assert_string_equal(info.device, dev[i]);
        assert_int_equal(info.device_numa_node, -1); /* a veth is on no PCI bus */
        shard_ip(a, i, ip, sizeof(ip));
        assert_string_equal(ip, ip_a[i]);
        assert_int_equal(sx_engine_shard_info(b, i, &info), SX_OK);
        assert_string_equal(info.device, dev[i]);
        shard_ip(b, i, ip, sizeof(ip));
        assert_string_equal(ip, ip_b[i]);
    }

    /* What each veth carried against what each shard's socket sent and
     * received: the engines share no other link (their namespaces' lo is
     * down), and every datagram shard i sends must leave by veth i. */
    unsigned long long veth_tx[2], veth_rx[2];
    uint64_t shard_tx[2], shard_rx[2];
    for (unsigned i = 0; i < 2; i++) {
        veth_tx[i] = veth_counter(ns.a, dev[i], "tx_packets");
        veth_rx[i] = veth_counter(ns.b, dev[i], "rx_packets");
        shard_tx[i] = shard_datagrams(a, i, true);
        shard_rx[i] = shard_datagrams(b, i, false);
    }
    sx_peer_h a_to_b = am_connect(a, b, 2);
    sx_peer_h b_to_a = am_connect(b, a, 1);
    exchange(a, b, a_to_b, 2, 50);
    exchange(b, a, b_to_a, 2, 50);
    for (unsigned i = 0; i < 2; i++) {
        unsigned long long sent = veth_counter(ns.a, dev[i], "tx_packets") - veth_tx[i];
        unsigned long long got = veth_counter(ns.b, dev[i], "rx_packets") - veth_rx[i];
        uint64_t tx = shard_datagrams(a, i, true) - shard_tx[i];
        uint64_t rx = shard_datagrams(b, i, false) - shard_rx[i];
        /* Data, ACKs and the handshake: a few datagrams at least, even
         * with the 50 small messages of a lane aggregated. */
        print_message("%s: shard %u sent %llu and its peer received %llu datagrams; the veth "
                      "pair carried %llu and %llu packets\n",
                      dev[i], i, (unsigned long long)tx, (unsigned long long)rx, sent, got);
        assert_true(tx >= 3);
        assert_true(rx >= 3);
        if (sent < tx || got < rx)
            fail_msg("%s carried %llu packets out of %s and %llu into %s, but shard %u sent %llu "
                     "and received %llu datagrams",
                     dev[i], sent, ns.a, got, ns.b, i, (unsigned long long)tx,
                     (unsigned long long)rx);
    }
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

/* An interface without an IPv4 address (a fresh namespace's lo is down
 * and has none): listed alone it is SX_ERR_NO_DEVICE; beside one with an
 * address it is skipped with a warning, and every shard takes the other. */
static void test_netns_interface_without_ipv4(void **state)
{
    (void)state;
    if (netns_skip()) {
        skip();
        return;
    }
    const sx_config_kv_t alone[] = {{"NET_DEVICES", "lo"}, {"SHARDS", "2"}};
    int rc;
    capture_start();
    sx_engine_h e = engine_in(ns.a, alone, 2, &rc);
    char *log = capture_stop();
    assert_int_equal(rc, SX_ERR_NO_DEVICE);
    assert_null(e);
    assert_contains(log, "none of the interfaces SX_NET_DEVICES='lo' names has an IPv4 address");
    free(log);

    const sx_config_kv_t beside[] = {{"NET_DEVICES", "lo,vethB"}, {"SHARDS", "2"}};
    capture_start();
    e = engine_in(ns.a, beside, 2, &rc);
    log = capture_stop();
    assert_int_equal(rc, SX_OK);
    assert_contains(log, "interface lo has no IPv4 address; udp skips it");
    free(log);
    char ip[INET_ADDRSTRLEN];
    for (unsigned i = 0; i < 2; i++) {
        sx_shard_info_t info;
        assert_int_equal(sx_engine_shard_info(e, i, &info), SX_OK);
        assert_string_equal(info.device, "vethB");
        shard_ip(e, i, ip, sizeof(ip));
        assert_string_equal(ip, "10.77.2.1");
    }
    sx_engine_destroy(e);
}

/* The addresses shard 0's kind 5 or 6 card address (udp's default)
 * offers, "a.b.c.d/len" then "x::y/len", separated by spaces. */
static void card_addrs(sx_engine_h e, char *out, size_t cap)
{
    sx_tl_iface_t *iface = e->shards[0]->ifaces[SX_SHARD_TL_NET];
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr), off = 0;

    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    assert_true(addr[0] == 5 || addr[0] == 6);
    out[0] = '\0';
    for (unsigned i = 0; i < addr[1] && off < cap; i++) {
        char ip[INET_ADDRSTRLEN];
        assert_non_null(inet_ntop(AF_INET, addr + 14 + 5 * i, ip, sizeof(ip)));
        off += (size_t)snprintf(out + off, cap - off, "%s%s/%u", off ? " " : "", ip,
                                addr[14 + 5 * i + 4]);
    }
    size_t at6 = 14 + 5 * (size_t)addr[1];
    for (unsigned i = 0; addr[0] == 6 && i < addr[at6] && off < cap; i++) {
        const uint8_t *entry = addr + at6 + 1 + 17 * i;
        char ip[INET6_ADDRSTRLEN];
        assert_non_null(inet_ntop(AF_INET6, entry, ip, sizeof(ip)));
        off += (size_t)snprintf(out + off, cap - off, "%s%s/%u", off ? " " : "", ip, entry[16]);
    }
    assert_int_equal(len, addr[0] == 5 ? at6 : at6 + 1 + 17 * (size_t)addr[at6]);
}

/* UDP datagrams namespace @p name has sent over IPv6 so far. */
static unsigned long long udp6_out(const char *name)
{
    char out[64];
    assert_int_equal(run(out, sizeof(out),
                         "ip netns exec %s awk '$1 == \"Udp6OutDatagrams\" {print $2}' "
                         "/proc/net/snmp6",
                         name),
                     0);
    return strtoull(out, NULL, 10);
}

/*
 * IPv6 beside IPv4: with four global IPv6 addresses on the veths (and
 * their link-local ones, which are never offered), the card lists the two
 * IPv4 addresses and then all four IPv6 ones (kind 6, 93 bytes); an IPv6
 * subnet filter keeps only what it holds, and an engine in the other
 * namespace told to use IPv6 only reaches this one over it.
 */
static void test_netns_ipv6(void **state)
{
    (void)state;
    if (netns_skip()) {
        skip();
        return;
    }
    static const char *const add[] = {
        "ip netns exec %1$s sysctl -q -w net.ipv6.conf.all.disable_ipv6=0",
        "ip netns exec %2$s sysctl -q -w net.ipv6.conf.all.disable_ipv6=0",
        "ip -n %1$s addr add fd77:1::1/64 dev vethA nodad",
        "ip -n %1$s addr add fd77:1::11/64 dev vethA nodad",
        "ip -n %1$s addr add fd77:2::1/64 dev vethB nodad",
        "ip -n %1$s addr add fd77:2::11/64 dev vethB nodad",
        "ip -n %2$s addr add fd77:1::2/64 dev vethA nodad",
    };
    char out[256];
    for (size_t i = 0; i < sizeof(add) / sizeof(add[0]); i++)
        if (run(out, sizeof(out), add[i], ns.a, ns.b) != 0)
            fail_msg("%s: %s", add[i], out);

    int rc;
    sx_engine_h e = engine_in(ns.a, NULL, 0, &rc);
    assert_int_equal(rc, SX_OK);
    char got[256];
    card_addrs(e, got, sizeof(got));
    /* IPv4 first; the IPv6 ones in the kernel's order. */
    assert_int_equal(strncmp(got, "10.77.1.1/24 10.77.2.1/24 ", 26), 0);
    static const char *const want6[] = {"fd77:1::1/64", "fd77:1::11/64", "fd77:2::1/64",
                                        "fd77:2::11/64"};
    for (size_t i = 0; i < 4; i++) {
        char word[32];
        snprintf(word, sizeof(word), " %s", want6[i]);
        if (strstr(got, word) == NULL)
            fail_msg("%s not offered: %s", want6[i], got);
    }
    unsigned words = 1;
    for (const char *p = got; *p != '\0'; p++)
        words += *p == ' ';
    assert_int_equal(words, 6);
    sx_engine_destroy(e);
    const sx_config_kv_t only2[] = {{"BIND_ADDR", "fd77:2::/64"}};
    e = engine_in(ns.a, only2, 1, &rc);
    assert_int_equal(rc, SX_OK);
    card_addrs(e, got, sizeof(got));
    assert_true(strcmp(got, "fd77:2::1/64 fd77:2::11/64") == 0 ||
                strcmp(got, "fd77:2::11/64 fd77:2::1/64") == 0);
    sx_engine_destroy(e);

    /* A (fd77:1::/64 only) and B (the same): messages both ways, every
     * one over IPv6 (the namespaces' UDP6 counters grow; their lo is down
     * and no IPv4 address is offered). */
    const sx_config_kv_t six[] = {{"BIND_ADDR", "fd77:1::/64"}, {"SHARDS", "1"}};
    sx_engine_h a = engine_in(ns.a, six, 2, &rc);
    assert_int_equal(rc, SX_OK);
    sx_engine_h b = engine_in(ns.b, six, 2, &rc);
    assert_int_equal(rc, SX_OK);
    unsigned long long before = udp6_out(ns.a);
    sx_peer_h a_to_b = am_connect(a, b, 2);
    sx_peer_h b_to_a = am_connect(b, a, 1);
    exchange(a, b, a_to_b, 1, 20);
    exchange(b, a, b_to_a, 1, 20);
    assert_true(udp6_out(ns.a) > before);
    sx_engine_destroy(a);
    sx_engine_destroy(b);

    static const char *const del[] = {
        "ip -n %1$s addr del fd77:1::1/64 dev vethA", "ip -n %1$s addr del fd77:1::11/64 dev vethA",
        "ip -n %1$s addr del fd77:2::1/64 dev vethB", "ip -n %1$s addr del fd77:2::11/64 dev vethB",
        "ip -n %2$s addr del fd77:1::2/64 dev vethA",
    };
    for (size_t i = 0; i < sizeof(del) / sizeof(del[0]); i++)
        (void)run(NULL, 0, del[i], ns.a, ns.b);
}

/*
 * SX_NET_DEVICES and SX_BIND_ADDR read as filters (names, subnets, '^'):
 * a subnet picks the interface with an address in it, an exclusion every
 * other one (lo, down and without an address, never); a subnet nothing
 * has is SX_ERR_NO_DEVICE; by default the card offers both veths'
 * addresses, and "^vethA" leaves vethB's.
 */
static void test_netns_filters(void **state)
{
    (void)state;
    if (netns_skip()) {
        skip();
        return;
    }
    static const struct {
        const char *devices, *dev, *ip;
    } pick[] = {{"10.77.2.0/24", "vethB", "10.77.2.1"},
                {"^vethA", "vethB", "10.77.2.1"},
                {"10.77.1.1/32,vethB", "vethA", "10.77.1.1"}};
    for (size_t k = 0; k < sizeof(pick) / sizeof(pick[0]); k++) {
        const sx_config_kv_t kv[] = {{"NET_DEVICES", pick[k].devices}, {"SHARDS", "2"}};
        int rc;
        sx_engine_h e = engine_in(ns.a, kv, 2, &rc);
        assert_int_equal(rc, SX_OK);
        sx_shard_info_t info;
        char ip[INET_ADDRSTRLEN];
        assert_int_equal(sx_engine_shard_info(e, 0, &info), SX_OK);
        assert_string_equal(info.device, pick[k].dev);
        shard_ip(e, 0, ip, sizeof(ip));
        assert_string_equal(ip, pick[k].ip);
        sx_engine_destroy(e);
    }
    const sx_config_kv_t none[] = {{"NET_DEVICES", "10.99.0.0/16"}};
    int rc;
    capture_start();
    sx_engine_h e = engine_in(ns.a, none, 1, &rc);
    char *log = capture_stop();
    assert_int_equal(rc, SX_ERR_NO_DEVICE);
    assert_null(e);
    assert_contains(log, "no interface that is up has an IPv4 address that "
                         "SX_NET_DEVICES='10.99.0.0/16' allows");
    free(log);

    /* An engine that offers nothing outside its host (SX_BIND_ADDR=lo)
     * cannot be reached from another one: sx_peer_add says so, naming
     * what each side offers. */
    const sx_config_kv_t lo_only[] = {{"BIND_ADDR", "lo"}};
    sx_engine_h hidden = engine_in(ns.b, lo_only, 1, &rc);
    assert_int_equal(rc, SX_OK);
    e = engine_in(ns.a, NULL, 0, &rc);
    assert_int_equal(rc, SX_OK);
    uint8_t card[4096];
    size_t clen = sizeof(card);
    assert_int_equal(sx_engine_address(hidden, card, &clen), SX_OK);
    sx_peer_h peer = NULL;
    capture_start();
    assert_int_equal(sx_peer_add(e, 7, card, clen, &peer), SX_ERR_PEER_UNREACHABLE);
    log = capture_stop();
    assert_contains(log, "peer 7's shard 0 has an unreachable address");
    assert_contains(log, "loopback only");
    assert_contains(log, "ours: udp port");
    assert_contains(log, "10.77.1.1/24 10.77.2.1/24");
    free(log);
    sx_engine_destroy(e);
    sx_engine_destroy(hidden);

    static const struct {
        const char *bind, *offers;
    } offer[] = {{"", "10.77.1.1/24 10.77.2.1/24"},
                 {"^vethA", "10.77.2.1/24"},
                 {"10.77.1.0/24", "10.77.1.1/24"},
                 {"vethB,vethA", "10.77.1.1/24 10.77.2.1/24"}};
    for (size_t k = 0; k < sizeof(offer) / sizeof(offer[0]); k++) {
        const sx_config_kv_t kv[] = {{"BIND_ADDR", offer[k].bind}};
        e = engine_in(ns.a, kv, 1, &rc);
        assert_int_equal(rc, SX_OK);
        char got[128];
        card_addrs(e, got, sizeof(got));
        assert_string_equal(got, offer[k].offers);
        sx_engine_destroy(e);
    }
}

/*
 * The defaults across hosts: engines in A and B offer both veths'
 * addresses and each picks the peer's on its first shared subnet (vethA).
 * With vethA taken down after the engines were made, that pair never
 * answers: after three CONNECTs each side moves to the next pair (vethB),
 * says so naming both ends, and messages cross in both directions.
 */
static void test_netns_default_fallback(void **state)
{
    (void)state;
    if (netns_skip()) {
        skip();
        return;
    }
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}};
    int rc_a, rc_b;
    sx_engine_h a = engine_in(ns.a, kv, 1, &rc_a);
    sx_engine_h b = engine_in(ns.b, kv, 1, &rc_b);
    assert_int_equal(rc_a, SX_OK);
    assert_int_equal(rc_b, SX_OK);
    assert_int_equal(run(NULL, 0, "ip -n %s link set vethA down", ns.a), 0);
    if (getenv("DBG") == NULL)
        capture_start();
    sx_peer_h a_to_b = am_connect(a, b, 2);
    sx_peer_h b_to_a = am_connect(b, a, 1);
    exchange(a, b, a_to_b, 1, 20);
    exchange(b, a, b_to_a, 1, 20);
    char *log = capture_stop();
    assert_int_equal(run(NULL, 0, "ip -n %s link set vethA up", ns.a), 0);
    assert_contains(log, "no answer to our connection requests; trying its next address: udp "
                         "10.77.1.2:");
    assert_contains(log, "-> udp 10.77.2.2:");
    free(log);
    uint64_t failures = 0;
    assert_int_equal(sx_stats_value(a, "chan_failures", &failures), SX_OK);
    assert_int_equal(failures, 0);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

int main(void)
{
    const struct CMUnitTest rule[] = {
        cmocka_unit_test(test_one_nic_per_numa_node),
        cmocka_unit_test(test_two_nics_on_one_node),
        cmocka_unit_test(test_unknown_locality_is_round_robin),
        cmocka_unit_test(test_one_device_for_everyone),
        cmocka_unit_test(test_machine_level_nic),
        cmocka_unit_test(test_list_and_net_devices_filter),
        cmocka_unit_test(test_namelist_syntax),
        cmocka_unit_test(test_engine_lo),
        cmocka_unit_test(test_engine_bad_devices),
#if SX_HAVE_OFI
        cmocka_unit_test(test_engine_lo_ofi),
        cmocka_unit_test(test_engine_bad_devices_ofi),
#endif
    };
    const struct CMUnitTest netns[] = {
        cmocka_unit_test(test_netns_two_veths),
        cmocka_unit_test(test_netns_interface_without_ipv4),
        cmocka_unit_test(test_netns_filters),
        cmocka_unit_test(test_netns_ipv6),
        cmocka_unit_test(test_netns_default_fallback),
    };
    sx_test_filter_from_env();
    int failed = cmocka_run_group_tests(rule, NULL, NULL);
    failed += cmocka_run_group_tests(netns, netns_setup, netns_teardown);
    return failed;
}
