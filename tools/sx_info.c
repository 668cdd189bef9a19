/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_info: what this shardx build contains, every configuration parameter,
 * the transports (built, available, selected), the topology the engine
 * sees with each shard's device, and the network devices hwloc finds.
 * `--json` prints one JSON object.
 *
 * Everything but the device list comes through the shared library's
 * public API. The device list comes from src/engine/nic.c, compiled into
 * this program, because an engine loads I/O locality only when its
 * transport has devices to choose among, and sx_info should show the
 * NICs whatever transport runs.
 */
#include <shardx.h>

#include <hwloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <getopt.h>
#include <string.h>

#include "engine/nic.h"

static const struct {
    unsigned bit;
    const char *name;
} sx_info_features[] = {
    {SX_FEATURE_OFI, "ofi"},   {SX_FEATURE_VERBS, "verbs"},         {SX_FEATURE_RDMACM, "rdmacm"},
    {SX_FEATURE_PMIX, "pmix"}, {SX_FEATURE_DEBUG, "debug"},         {SX_FEATURE_ASAN, "asan"},
    {SX_FEATURE_TSAN, "tsan"}, {SX_FEATURE_RET_THUNK, "ret_thunk"},
};
#define SX_INFO_NFEATURES (sizeof(sx_info_features) / sizeof(sx_info_features[0]))

static void json_string(const char *s)
{
    putchar('"');
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* The network devices hwloc sees, located; NULL topology when hwloc
 * failed. */
typedef struct nic_view {
    hwloc_topology_t topology;
    sx_nic_t *nics;
    unsigned n;
} nic_view_t;

static void nic_view_load(nic_view_t *v)
{
    memset(v, 0, sizeof(*v));
    if (sx_nic_topology_load(NULL, &v->topology) != SX_OK) {
        v->topology = NULL;
        return;
    }
    int n = sx_nic_list(v->topology, NULL, 0);
    if (n <= 0)
        return;
    v->nics = calloc((size_t)n, sizeof(*v->nics));
    if (v->nics == NULL || sx_nic_list(v->topology, v->nics, (unsigned)n) != n) {
        free(v->nics);
        v->nics = NULL;
        return;
    }
    v->n = (unsigned)n;
}

static void nic_view_free(nic_view_t *v)
{
    sx_nic_release(v->nics, v->n);
    free(v->nics);
    if (v->topology != NULL)
        hwloc_topology_destroy(v->topology);
}

static bool nic_near(const sx_nic_t *nic, hwloc_obj_t node)
{
    return nic->cpuset != NULL && node->cpuset != NULL &&
           hwloc_bitmap_intersects(nic->cpuset, node->cpuset);
}

static void print_nics_text(const nic_view_t *v)
{
    printf("\nNetwork devices (hwloc; SX_NET_DEVICES restricts those a transport uses):\n");
    if (v->topology == NULL) {
        printf("  unavailable: hwloc could not load the I/O topology\n");
        return;
    }
    if (v->n == 0) {
        printf("  none: hwloc sees no network or OpenFabrics device on a PCI bus\n");
        return;
    }
    for (unsigned i = 0; i < v->n; i++) {
        const sx_nic_t *d = &v->nics[i];
        char where[64] = "locality unknown";
        if (d->numa_nodes[0] != '\0')
            snprintf(where, sizeof(where), "NUMA node%s %s", d->numa_node < 0 ? "s" : "",
                     d->numa_nodes);
        printf("  %-14s %-12s %s\n", d->name, sx_nic_type_name(d->osdev_type), where);
    }
    hwloc_obj_t node = NULL;
    while ((node = hwloc_get_next_obj_by_type(v->topology, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        printf("  nearest to NUMA node %u:", node->logical_index);
        unsigned near = 0;
        for (unsigned i = 0; i < v->n; i++) {
            if (nic_near(&v->nics[i], node))
                printf("%s %s", near++ ? "," : "", v->nics[i].name);
        }
        printf("%s\n", near ? "" : " none (a shard there takes any device)");
    }
}

static void print_nics_json(const nic_view_t *v)
{
    printf(",\"network_devices\":");
    if (v->topology == NULL) {
        printf("{\"error\":\"hwloc could not load the I/O topology\"}");
        return;
    }
    printf("{\"devices\":[");
    for (unsigned i = 0; i < v->n; i++) {
        const sx_nic_t *d = &v->nics[i];
        char cpuset[256] = "";
        if (d->cpuset != NULL)
            hwloc_bitmap_list_snprintf(cpuset, sizeof(cpuset), d->cpuset);
        printf("%s{\"name\":", i ? "," : "");
        json_string(d->name);
        printf(",\"type\":\"%s\",\"numa_node\":%d,\"numa_nodes\":", sx_nic_type_name(d->osdev_type),
               d->numa_node);
        if (d->numa_nodes[0] != '\0')
            json_string(d->numa_nodes);
        else
            fputs("null", stdout);
        printf(",\"cpuset\":");
        if (d->cpuset != NULL)
            json_string(cpuset);
        else
            fputs("null", stdout);
        putchar('}');
    }
    printf("],\"nearest\":[");
    hwloc_obj_t node = NULL;
    unsigned k = 0;
    while ((node = hwloc_get_next_obj_by_type(v->topology, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        printf("%s{\"numa_node\":%u,\"devices\":[", k++ ? "," : "", node->logical_index);
        unsigned near = 0;
        for (unsigned i = 0; i < v->n; i++) {
            if (!nic_near(&v->nics[i], node))
                continue;
            if (near++)
                putchar(',');
            json_string(v->nics[i].name);
        }
        printf("]}");
    }
    printf("]}");
}

/* Text sections, chosen on the command line (all by default). */
enum {
    SEC_BUILD = 1u << 0,
    SEC_CONFIG = 1u << 1,
    SEC_TRANSPORTS = 1u << 2,
    SEC_TOPOLOGY = 1u << 3,
    SEC_DEVICES = 1u << 4,
    SEC_ALL = 0x1fu,
};

static void print_build_text(const sx_build_info_t *b)
{
    printf("shardx %s\n", b->version);
    printf("  build type:    %s\n", b->build_type);
    printf("  compiler:      %s\n", b->compiler);
    printf("  dependencies:  %s\n", b->dependencies);
    printf("  optional libs: %s\n", b->optional[0] != '\0' ? b->optional : "(none found)");
    printf("  compiled parts:");
    for (size_t i = 0; i < SX_INFO_NFEATURES; i++)
        printf(" %s=%s", sx_info_features[i].name,
               (b->features & sx_info_features[i].bit) ? "yes" : "no");
    printf("\n");
}

/* Each parameter with the value an engine created here would use and
 * where it comes from: sx_info passes no engine parameters, so that is
 * the environment (SX_<NAME>) or the default. */
static void print_config_text(void)
{
    printf("Parameters (effective value and its source; engine parameters, then the "
           "environment SX_<NAME>, then the default):\n");
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t p;
        if (sx_param_info(i, &p) != SX_OK)
            continue;
        char env[64];
        snprintf(env, sizeof(env), "SX_%s", p.name);
        const char *set = getenv(env);
        const char *value = set != NULL ? set : p.default_value;
        printf("  SX_%-16s %-7s '%s' (%s)%s%s%s, allowed %s\n      %s\n", p.name, p.type_name,
               value, set != NULL ? "environment" : "default", set != NULL ? "; default '" : "",
               set != NULL ? p.default_value : "", set != NULL ? "'" : "", p.allowed,
               p.description);
    }
}

static void print_transports_text(sx_engine_h engine, int engine_rc)
{
    printf("Transports (SX_TRANSPORTS; the available network one with the highest "
           "exclusivity is selected):\n");
    if (engine_rc != SX_OK) {
        printf("  unknown: %s\n", sx_strerror(engine_rc));
        return;
    }
    sx_transport_info_t t;
    for (unsigned i = 0; sx_engine_transport_info(engine, i, &t) == SX_OK; i++) {
        const char *state = t.selected    ? "selected"
                            : !t.built    ? "not built"
                            : !t.allowed  ? "excluded"
                            : t.available ? "available"
                                          : "unavailable";
        char excl[24] = "";
        if (t.available)
            snprintf(excl, sizeof(excl), "exclusivity %u", t.exclusivity);
        printf("  %-6s %-11s %-16s %s\n", t.name, state, excl, t.detail);
    }
}

static void print_topology_text(sx_engine_h engine, int engine_rc)
{
    printf("Topology:\n");
    if (engine_rc != SX_OK) {
        printf("  unavailable: %s\n", sx_strerror(engine_rc));
        return;
    }
    sx_topology_info_t topo;
    sx_engine_topology(engine, &topo);
    unsigned n = topo.shards;
    printf("  cores: %u%s, NUMA nodes: %u, shards: %u\n", topo.cores,
           topo.cores_are_pus ? " (PUs; no core objects reported)" : "", topo.numa_nodes, n);
    for (unsigned i = 0; i < n; i++) {
        sx_shard_info_t s;
        if (sx_engine_shard_info(engine, i, &s) != SX_OK)
            continue;
        /* New fields go at the end of the line, so that a script reading
         * the fields before them by position still finds them. */
        printf("  shard %-3u core %-3d first PU %-3d NUMA node %-2d cpuset %-6s", s.index, s.core,
               s.first_pu, s.numa_node, s.cpuset);
        if (s.device[0] == '\0')
            printf(" device (the transport's default)\n");
        else if (s.device_numa_node < 0)
            printf(" device %s (NUMA node unknown)\n", s.device);
        else
            printf(" device %s (NUMA node %d)\n", s.device, s.device_numa_node);
    }
}

/* The members of the top-level object up to the topology; the caller
 * writes the braces around them. */
static void print_json(const sx_build_info_t *b, sx_engine_h engine, int engine_rc)
{
    printf("\"version\":");
    json_string(b->version);
    printf(",\"build\":{\"type\":");
    json_string(b->build_type);
    printf(",\"compiler\":");
    json_string(b->compiler);
    printf(",\"dependencies\":");
    json_string(b->dependencies);
    printf(",\"optional\":");
    json_string(b->optional);
    printf(",\"features\":{");
    for (size_t i = 0; i < SX_INFO_NFEATURES; i++)
        printf("%s\"%s\":%s", i ? "," : "", sx_info_features[i].name,
               (b->features & sx_info_features[i].bit) ? "true" : "false");
    printf("}},\"parameters\":[");
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t p;
        if (sx_param_info(i, &p) != SX_OK)
            continue;
        printf("%s{\"name\":", i ? "," : "");
        json_string(p.name);
        printf(",\"env\":\"SX_%s\",\"type\":", p.name);
        json_string(p.type_name);
        printf(",\"default\":");
        json_string(p.default_value);
        printf(",\"allowed\":");
        json_string(p.allowed);
        printf(",\"description\":");
        json_string(p.description);
        putchar('}');
    }
    printf("],\"transports\":[");
    sx_transport_info_t t;
    for (unsigned i = 0; engine_rc == SX_OK && sx_engine_transport_info(engine, i, &t) == SX_OK;
         i++) {
        printf("%s{\"name\":", i ? "," : "");
        json_string(t.name);
        printf(",\"built\":%s,\"network\":%s,\"allowed\":%s,\"available\":%s,\"selected\":%s,"
               "\"exclusivity\":%u,\"mtu\":%zu,\"variant\":",
               t.built ? "true" : "false", t.network ? "true" : "false",
               t.allowed ? "true" : "false", t.available ? "true" : "false",
               t.selected ? "true" : "false", t.exclusivity, t.mtu);
        if (t.variant != NULL)
            json_string(t.variant);
        else
            fputs("null", stdout);
        printf(",\"detail\":");
        json_string(t.detail);
        putchar('}');
    }
    printf("],\"topology\":");
    if (engine_rc != SX_OK) {
        printf("{\"error\":");
        json_string(sx_strerror(engine_rc));
        putchar('}');
        return;
    }
    sx_topology_info_t topo;
    sx_engine_topology(engine, &topo);
    unsigned n = topo.shards;
    printf("{\"cores\":%u,\"cores_are_pus\":%s,\"numa_nodes\":%u,\"shards\":[", topo.cores,
           topo.cores_are_pus ? "true" : "false", topo.numa_nodes);
    for (unsigned i = 0; i < n; i++) {
        sx_shard_info_t s;
        if (sx_engine_shard_info(engine, i, &s) != SX_OK)
            continue;
        printf("%s{\"index\":%u,\"core\":%d,\"first_pu\":%d,\"numa_node\":%d,\"cpuset\":",
               i ? "," : "", s.index, s.core, s.first_pu, s.numa_node);
        json_string(s.cpuset);
        printf(",\"device\":");
        if (s.device[0] != '\0')
            json_string(s.device);
        else
            fputs("null", stdout);
        printf(",\"device_numa_node\":%d}", s.device_numa_node);
    }
    printf("]}");
}

static void usage(FILE *out)
{
    fprintf(out, "usage: sx_info [--json] [-b|--build] [-c|--config] [-t|--transports]\n"
                 "               [-T|--topology] [-d|--devices] [--version] [-h|--help]\n"
                 "Prints the shardx version and build options (-b), each configuration\n"
                 "parameter with its effective value and where it comes from (-c), the\n"
                 "transports: which are built, available and selected (-t), the topology\n"
                 "an engine would use here: shards, cores, NUMA nodes, each shard's device\n"
                 "(-T), and the network devices hwloc sees with their NUMA locality (-d).\n"
                 "Without a section option, all of them; --json prints everything as one\n"
                 "JSON object.\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"build", no_argument, NULL, 'b'},
        {"config", no_argument, NULL, 'c'},
        {"transports", no_argument, NULL, 't'},
        {"topology", no_argument, NULL, 'T'},
        {"devices", no_argument, NULL, 'd'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    unsigned sections = 0;
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":bctTdh", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'b':
            sections |= SEC_BUILD;
            break;
        case 'c':
            sections |= SEC_CONFIG;
            break;
        case 't':
            sections |= SEC_TRANSPORTS;
            break;
        case 'T':
            sections |= SEC_TOPOLOGY;
            break;
        case 'd':
            sections |= SEC_DEVICES;
            break;
        case 'V': {
            sx_build_info_t b;
            printf("sx_info (shardx) %s\n", sx_build_info(&b) == SX_OK ? b.version : "unknown");
            return 0;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "sx_info: unknown option '%s' (see sx_info --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sx_info: unexpected argument '%s' (see sx_info --help)\n", argv[optind]);
        return 2;
    }
    if (sections == 0)
        sections = SEC_ALL;

    sx_build_info_t build;
    sx_build_info(&build);
    sx_engine_h engine = NULL;
    int rc = sx_engine_create(NULL, &engine);
    nic_view_t nics;
    nic_view_load(&nics);
    if (json) {
        putchar('{');
        print_json(&build, engine, rc);
        print_nics_json(&nics);
        printf("}\n");
    } else {
        bool first = true;
        if (sections & SEC_BUILD) {
            print_build_text(&build);
            first = false;
        }
        if (sections & SEC_CONFIG) {
            printf("%s", first ? "" : "\n");
            print_config_text();
            first = false;
        }
        if (sections & SEC_TRANSPORTS) {
            printf("%s", first ? "" : "\n");
            print_transports_text(engine, rc);
            first = false;
        }
        if (sections & SEC_TOPOLOGY) {
            printf("%s", first ? "" : "\n");
            print_topology_text(engine, rc);
            first = false;
        }
        if (sections & SEC_DEVICES)
            print_nics_text(&nics); /* starts with its own blank line */
    }
    nic_view_free(&nics);
    if (rc == SX_OK)
        sx_engine_destroy(engine);
    /* An invalid SX_* setting is worth a non-zero exit: scripts check it. */
    return rc == SX_OK ? 0 : 1;
}
