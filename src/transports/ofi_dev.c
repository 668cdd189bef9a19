/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ofi_dev: libfabric, opened on first use, and the choice of what an ofi
 * interface opens: the provider, its domain (the devices slot and
 * SX_NET_DEVICES) and the fi_getinfo entry, and the query. ofi.c is the
 * interface and ofi_io.c its data path; ofi_int.h is what they share. Any
 * thread may call what is here (query, devices, open).
 *
 * Provider: config->ofi_provider (SX_OFI_PROVIDER), or the first that
 * fi_getinfo lists for these hints, which is libfabric's order of
 * preference (NIC providers before the socket emulations). Of its entries
 * the one whose source address is config->bind_addr (SX_BIND_ADDR; a port
 * there is bound too) is used when the provider speaks sockaddr_in (udp,
 * sockets); other providers take their first entry. Without SX_BIND_ADDR
 * a sockaddr provider takes its first entry that is not loopback, in
 * libfabric's order, and loopback's only when there is no other: peers
 * on this host reach that address as well as loopback, and peers on
 * other hosts reach only it. (The default used to be 127.0.0.1, with
 * which a job across hosts over the defaults could not connect: "no
 * answer from peer ... at ofi/udp 127.0.0.1:...".) An endpoint has one
 * address, so unlike udp's card, which offers every interface's and lets
 * each peer pick, a host whose first interface does not reach the other
 * hosts needs SX_BIND_ADDR or SX_NET_DEVICES.
 * Devices (SX_NET_DEVICES, config->net_devices): when the list is set,
 * ofi's devices are the named domains (fi_getinfo's domain_attr->name) of
 * that provider with an entry open could use, in the list's order: the
 * udp and sockets providers name their domains after the network
 * interfaces ("eth0", "lo"), NIC providers after their devices
 * ("mlx5_0"). The engine gives each shard one (config->device, by NIC
 * locality) and open takes that domain's entry, preferring an IPv4 one;
 * a sockaddr provider then binds to that entry's own source address, with
 * a kernel-chosen port, instead of SX_BIND_ADDR. The query fails with
 * SX_ERR_NO_DEVICE when a name is no such domain here. Without the list
 * there are no devices and SX_BIND_ADDR (or its default) rules.
 * What is not implemented: providers that need FI_MSG_PREFIX (verbs, efa
 * and usnic datagrams) or local memory registration (FI_MR_LOCAL) are not
 * asked for, so fi_getinfo leaves them out. FI_CONTEXT and FI_CONTEXT2 are
 * supported: every operation that completes has its own context.
 *
 * Loading: libfabric is opened with dlopen on first use, not linked. Its
 * library pulls in every provider's dependencies (libpsm_infinipath,
 * libpsm2, libefa, ...), whose constructors take a noticeable time at
 * every process start, and fi_getinfo's first call as much again; a
 * process that never selects ofi pays neither (docs/tuning.md, section
 * "Loading libfabric and libibverbs", has the measurements). The build
 * still finds libfabric with pkg-config, for its headers and to decide
 * whether to compile the ofi transport.
 */
#include "transports/ofi_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <shardx.h>

#include "common/inaddr.h"
#include "common/log.h"
#include "common/namelist.h"

#define OFI_LIBRARY     "libfabric.so.1"
#define OFI_API_VERSION FI_VERSION(1, 9)

/* ------------------------------------------------------------------ */
/* The library, opened on first use                                    */

ofi_lib_t sx_ofi_lib;
static pthread_once_t ofi_lib_once = PTHREAD_ONCE_INIT;

static void ofi_lib_load(void)
{
    /* Never closed: providers keep state (and threads, for some) for the
     * life of the process. */
    void *h = dlopen(OFI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        snprintf(sx_ofi_lib.error, sizeof(sx_ofi_lib.error), "cannot load %s: %s", OFI_LIBRARY,
                 why != NULL ? why : "unknown error");
        return;
    }
    /* dlsym returns void *; the standard way to turn it into a function
     * pointer is through memcpy of the object representation. */
#define OFI_SYM(field, name)                                                                 \
    do {                                                                                     \
        void *sym_ = dlsym(h, name);                                                         \
        if (sym_ == NULL) {                                                                  \
            snprintf(sx_ofi_lib.error, sizeof(sx_ofi_lib.error), "%s lacks %s", OFI_LIBRARY, \
                     name);                                                                  \
            return;                                                                          \
        }                                                                                    \
        memcpy(&sx_ofi_lib.field, &sym_, sizeof(sym_));                                      \
    } while (0)
    OFI_SYM(getinfo, "fi_getinfo");
    OFI_SYM(freeinfo, "fi_freeinfo");
    OFI_SYM(dupinfo, "fi_dupinfo");
    OFI_SYM(fabric, "fi_fabric");
    OFI_SYM(strerror, "fi_strerror");
    OFI_SYM(version, "fi_version");
#undef OFI_SYM
    uint32_t v = sx_ofi_lib.version();
    if (v < OFI_API_VERSION) {
        snprintf(sx_ofi_lib.error, sizeof(sx_ofi_lib.error), "libfabric %u.%u is older than %u.%u",
                 FI_MAJOR(v), FI_MINOR(v), FI_MAJOR(OFI_API_VERSION), FI_MINOR(OFI_API_VERSION));
        return;
    }
    sx_ofi_lib.error[0] = '\0';
}

/* SX_OK once libfabric is usable; else SX_ERR_NO_DEVICE with the reason. */
static int ofi_lib_get(char *why, size_t cap)
{
    (void)pthread_once(&ofi_lib_once, ofi_lib_load);
    if (sx_ofi_lib.strerror == NULL || sx_ofi_lib.error[0] != '\0') {
        snprintf(why, cap, "%s",
                 sx_ofi_lib.error[0] != '\0' ? sx_ofi_lib.error : "libfabric did not load");
        return SX_ERR_NO_DEVICE;
    }
    return SX_OK;
}

/* ------------------------------------------------------------------ */
/* Choosing the provider and the entry                                  */

/* libfabric's emulations over kernel sockets; the udp transport does
 * the same work without the extra layer. */
bool sx_ofi_prov_is_software(const char *prov)
{
    static const char *const soft[] = {"udp", "sockets", "tcp", "net", "shm"};
    char copy[128];

    snprintf(copy, sizeof(copy), "%s", prov != NULL ? prov : "");
    /* A utility provider over a core one is named "core;util". */
    for (char *save = NULL, *p = strtok_r(copy, ";", &save); p != NULL;
         p = strtok_r(NULL, ";", &save)) {
        for (size_t i = 0; i < sizeof(soft) / sizeof(soft[0]); i++) {
            if (strcmp(p, soft[i]) == 0)
                return true;
        }
    }
    return false;
}

/* A fabric device that a NIC provider could drive: anything under
 * /sys/class/infiniband (verbs, efa, usnic, psm2's hfi1) or /sys/class/cxi. */
static bool ofi_fabric_device_present(void)
{
    static const char *const dirs[] = {"/sys/class/infiniband", "/sys/class/cxi"};

    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        DIR *d = opendir(dirs[i]);
        if (d == NULL)
            continue;
        bool found = false;
        for (struct dirent *de; !found && (de = readdir(d)) != NULL;)
            found = de->d_name[0] != '.';
        closedir(d);
        if (found)
            return true;
    }
    return false;
}

/* Parses SX_BIND_ADDR ("a.b.c.d" or "a.b.c.d:port"). */
static int ofi_parse_bind(const char *text, struct in_addr *ip, uint16_t *port, char *why,
                          size_t cap)
{
    char host[INET_ADDRSTRLEN + 1];
    const char *colon = strchr(text, ':');
    size_t hostlen = colon != NULL ? (size_t)(colon - text) : strlen(text);
    unsigned long p = 0;
    char *end = NULL;

    *port = 0;
    if (hostlen == 0 || hostlen >= sizeof(host))
        goto bad;
    memcpy(host, text, hostlen);
    host[hostlen] = '\0';
    if (inet_pton(AF_INET, host, ip) != 1 || ip->s_addr == htonl(INADDR_ANY))
        goto bad;
    if (colon != NULL) {
        errno = 0;
        p = strtoul(colon + 1, &end, 10);
        if (colon[1] < '0' || colon[1] > '9' || errno != 0 || *end != '\0' || p > 65535)
            goto bad;
        *port = (uint16_t)p;
    }
    return SX_OK;
bad:
    snprintf(why, cap, "SX_BIND_ADDR '%s' is not a concrete IPv4 address, optionally with :port",
             text);
    return SX_ERR_INVALID_PARAM;
}

const struct sockaddr_in *sx_ofi_src_in(const struct fi_info *fi)
{
    if (fi->addr_format != FI_SOCKADDR_IN || fi->src_addr == NULL ||
        fi->src_addrlen < sizeof(struct sockaddr_in))
        return NULL;
    const struct sockaddr_in *sin = fi->src_addr;
    return sin->sin_family == AF_INET ? sin : NULL;
}

/* What these hints cannot use even if a provider offers it. */
static bool ofi_usable(const struct fi_info *fi)
{
    return (fi->mode & ~(uint64_t)(FI_CONTEXT | FI_CONTEXT2)) == 0 &&
           (fi->domain_attr->mr_mode & FI_MR_LOCAL) == 0 && fi->ep_attr->max_msg_size > 0 &&
           fi->tx_attr->size > 0 && fi->rx_attr->size > 0;
}

/* The hints this transport can live with; NULL when out of memory. */
static struct fi_info *ofi_hints(void)
{
    struct fi_info *hints = sx_ofi_lib.dupinfo(NULL);

    if (hints == NULL)
        return NULL;
    hints->ep_attr->type = FI_EP_DGRAM;
    hints->caps = FI_MSG;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    /* Bits that only matter for RMA, which this transport never does. */
    hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    return hints;
}

/* Names the providers with a usable datagram endpoint, for a diagnosis. */
static void ofi_list_providers(char *buf, size_t cap)
{
    struct fi_info *hints = ofi_hints(), *list = NULL;
    size_t off = 0;

    buf[0] = '\0';
    if (hints != NULL && sx_ofi_lib.getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list) == 0) {
        for (struct fi_info *fi = list; fi != NULL && off < cap; fi = fi->next) {
            bool dup = false;
            for (struct fi_info *g = list; g != fi && !dup; g = g->next)
                dup = ofi_usable(g) &&
                      strcmp(g->fabric_attr->prov_name, fi->fabric_attr->prov_name) == 0;
            if (ofi_usable(fi) && !dup)
                off += (size_t)snprintf(buf + off, cap - off, "%s%s", off ? ", " : "",
                                        fi->fabric_attr->prov_name);
        }
    }
    if (off == 0)
        snprintf(buf, cap, "none");
    sx_ofi_lib.freeinfo(list);
    sx_ofi_lib.freeinfo(hints);
}

/*
 * Lists fi_getinfo's entries for these hints and names the provider to
 * use among them: config->ofi_provider, or the first usable entry's
 * (libfabric's order of preference). SX_OK with *list_p (fi_freeinfo it)
 * and *prov_p (a string inside the list), or an error with the reason in
 * @p why.
 */
static int ofi_list_entries(const sx_tl_config_t *config, struct fi_info **list_p,
                            const char **prov_p, char *why, size_t cap)
{
    const char *want = config->ofi_provider != NULL && config->ofi_provider[0] != '\0'
                           ? config->ofi_provider
                           : NULL;
    struct fi_info *hints = NULL, *list = NULL;
    int rc = ofi_lib_get(why, cap);

    if (rc != SX_OK)
        return rc;
    hints = ofi_hints();
    if (hints == NULL)
        return SX_ERR_NO_MEMORY;
    if (want != NULL && (hints->fabric_attr->prov_name = strdup(want)) == NULL) {
        sx_ofi_lib.freeinfo(hints);
        return SX_ERR_NO_MEMORY;
    }
    int frc = sx_ofi_lib.getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
    sx_ofi_lib.freeinfo(hints);
    if (frc != 0 && frc != -FI_ENODATA) {
        snprintf(why, cap, "fi_getinfo: %s", ofi_err(frc));
        return SX_ERR_NO_DEVICE;
    }

    /* The provider: the first usable entry's (or the one asked for). */
    const char *prov = NULL;
    for (struct fi_info *fi = list; fi != NULL && prov == NULL; fi = fi->next) {
        if (ofi_usable(fi))
            prov = fi->fabric_attr->prov_name;
    }
    if (prov == NULL) {
        if (want != NULL) {
            char have[96];
            ofi_list_providers(have, sizeof(have));
            snprintf(why, cap,
                     "SX_OFI_PROVIDER='%s': libfabric has no usable datagram endpoint "
                     "(FI_EP_DGRAM, FI_MSG) from that provider here; it has: %s",
                     want, have);
        } else
            snprintf(why, cap, "libfabric has no usable datagram provider (FI_EP_DGRAM, FI_MSG)");
        sx_ofi_lib.freeinfo(list);
        return want != NULL ? SX_ERR_INVALID_PARAM : SX_ERR_NO_DEVICE;
    }
    *list_p = list;
    *prov_p = prov;
    return SX_OK;
}

static bool ofi_format_is_sockaddr(uint32_t format)
{
    return format == FI_SOCKADDR_IN || format == FI_SOCKADDR_IN6 || format == FI_SOCKADDR;
}

/*
 * The entry of provider @p prov on domain @p device that open would take:
 * its first usable one with an IPv4 source address, else its first whose
 * addresses are no socket addresses (a NIC provider's own names); NULL
 * when the domain has neither (an interface with IPv6 addresses only, or
 * no such domain).
 */
static struct fi_info *ofi_device_entry(struct fi_info *list, const char *prov, const char *device)
{
    struct fi_info *other = NULL;

    for (struct fi_info *fi = list; fi != NULL; fi = fi->next) {
        if (!ofi_usable(fi) || strcmp(fi->fabric_attr->prov_name, prov) != 0 ||
            fi->domain_attr->name == NULL || strcmp(fi->domain_attr->name, device) != 0)
            continue;
        if (sx_ofi_src_in(fi) != NULL)
            return fi;
        if (other == NULL && !ofi_format_is_sockaddr(fi->addr_format))
            other = fi;
    }
    return other;
}

/*
 * Checks config->net_devices against provider's domains here and lists,
 * in the list's order, the named ones open could use: writes up to @p max
 * of them to @p names and returns how many, with their names ("lo, eth0")
 * in @p text. A negative status, with why in @p text, when the list is
 * malformed, libfabric cannot be asked, or a name is no usable domain of
 * the provider here (the text then names the domains there are).
 */
static int ofi_scan_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX],
                            unsigned max, char *text, size_t text_len)
{
    char wanted[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX];
    char why[128];
    unsigned nwanted = 0, n = 0;
    struct fi_info *list = NULL;
    const char *prov = NULL;
    size_t off = 0;

    if (sx_namelist_parse(config->net_devices, wanted, SX_TL_DEVICES, &nwanted, why, sizeof(why)) !=
        SX_OK) {
        /* Exclusions and subnets are udp's (namelist.h). */
        snprintf(text, text_len,
                 "invalid SX_NET_DEVICES for ofi, which takes domain names only: %s", why);
        return SX_ERR_INVALID_PARAM;
    }
    int rc = ofi_list_entries(config, &list, &prov, text, text_len);
    if (rc != SX_OK)
        return rc;
    text[0] = '\0';
    for (unsigned i = 0; i < nwanted; i++) {
        if (ofi_device_entry(list, prov, wanted[i]) == NULL) {
            /* The domains there are, each once, for the diagnosis. */
            char have[160] = "";
            size_t hl = 0;
            for (struct fi_info *fi = list; fi != NULL && hl < sizeof(have); fi = fi->next) {
                const char *d = fi->domain_attr->name;
                if (d == NULL || ofi_device_entry(list, prov, d) != fi)
                    continue;
                hl += (size_t)snprintf(have + hl, sizeof(have) - hl, "%s%s", hl ? ", " : "", d);
            }
            snprintf(text, text_len,
                     "SX_NET_DEVICES names '%s', which is not a domain of libfabric provider %s "
                     "here (domains: %s)",
                     wanted[i], prov, hl != 0 ? have : "none");
            sx_ofi_lib.freeinfo(list);
            return SX_ERR_NO_DEVICE;
        }
        if (off < text_len)
            off += (size_t)snprintf(text + off, text_len - off, "%s%s", off != 0 ? ", " : "",
                                    wanted[i]);
        if (n < max)
            snprintf(names[n], SX_TL_DEVICE_MAX, "%s", wanted[i]);
        n++;
    }
    sx_ofi_lib.freeinfo(list);
    return (int)(n < max ? n : max);
}

/*
 * Finds the entry to open: returns a copy of it in *info_p (fi_freeinfo
 * it), or an error with the reason in @p why. With config->device (the
 * engine's choice among SX_NET_DEVICES) the entry is that domain's and
 * SX_BIND_ADDR is not read.
 */
int sx_ofi_pick(const sx_tl_config_t *config, struct fi_info **info_p, char *why, size_t cap)
{
    const char *bind =
        config->bind_addr != NULL && config->bind_addr[0] != '\0' ? config->bind_addr : NULL;
    const char *device =
        config->device != NULL && config->device[0] != '\0' ? config->device : NULL;
    struct fi_info *list = NULL, *chosen = NULL;
    const char *prov = NULL;
    struct in_addr ip = {0};
    uint16_t port = 0;
    int rc = ofi_lib_get(why, cap);

    if (rc != SX_OK)
        return rc;
    if (device == NULL && bind != NULL) {
        rc = ofi_parse_bind(bind, &ip, &port, why, cap);
        if (rc != SX_OK)
            return rc;
    }
    rc = ofi_list_entries(config, &list, &prov, why, cap);
    if (rc != SX_OK)
        return rc;

    if (device != NULL) {
        /* Port 0: shards on one domain cannot share a fixed port. */
        chosen = ofi_device_entry(list, prov, device);
        if (chosen == NULL) {
            /* The query saw it a moment ago: it went away or lost its
             * address. */
            snprintf(why, cap, "provider %s has no usable endpoint on domain %s (SX_NET_DEVICES)",
                     prov, device);
            sx_ofi_lib.freeinfo(list);
            return SX_ERR_NO_DEVICE;
        }
    }

    /* Without a device: for providers on IPv4 sockets, the entry bound
     * where SX_BIND_ADDR says, or without it the first whose address is
     * not loopback, in libfabric's order (loopback's when there is no
     * other); the first entry for other providers. */
    bool sockets = false;
    struct fi_info *lo = NULL;
    char seen[96] = "";
    size_t seen_len = 0;
    for (struct fi_info *fi = list; fi != NULL && chosen == NULL; fi = fi->next) {
        if (!ofi_usable(fi) || strcmp(fi->fabric_attr->prov_name, prov) != 0)
            continue;
        const struct sockaddr_in *sin = sx_ofi_src_in(fi);
        if (sin == NULL) {
            if (!ofi_format_is_sockaddr(fi->addr_format) && !sockets)
                chosen = fi;
            continue;
        }
        sockets = true;
        if (bind != NULL ? sin->sin_addr.s_addr == ip.s_addr : !sx_in4_loopback(sin->sin_addr)) {
            chosen = fi;
        } else if (bind == NULL && lo == NULL) {
            lo = fi;
        } else if (seen_len < sizeof(seen)) {
            char a[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &sin->sin_addr, a, sizeof(a));
            seen_len += (size_t)snprintf(seen + seen_len, sizeof(seen) - seen_len, "%s%s",
                                         seen_len ? ", " : "", a);
        }
    }
    if (chosen == NULL && lo != NULL)
        chosen = lo;
    if (chosen == NULL) {
        snprintf(why, cap, "provider %s has no endpoint on SX_BIND_ADDR %s (it has: %s)", prov,
                 bind != NULL ? bind : "(empty: any IPv4 address)",
                 seen_len ? seen : "no IPv4 address");
        sx_ofi_lib.freeinfo(list);
        return SX_ERR_INVALID_PARAM;
    }
    struct fi_info *copy = sx_ofi_lib.dupinfo(chosen);
    sx_ofi_lib.freeinfo(list);
    if (copy == NULL)
        return SX_ERR_NO_MEMORY;
    struct sockaddr_in *src = copy->addr_format == FI_SOCKADDR_IN ? copy->src_addr : NULL;
    if (src != NULL)
        src->sin_port = htons(port);
    *info_p = copy;
    return SX_OK;
}

size_t sx_ofi_mtu_of(const struct fi_info *fi)
{
    return fi->ep_attr->max_msg_size < OFI_MTU_MAX ? (size_t)fi->ep_attr->max_msg_size
                                                   : OFI_MTU_MAX;
}

int sx_ofi_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q)
{
    struct fi_info *fi = NULL;
    char domains[SX_TL_DETAIL_MAX];
    int rc;
    bool asked = named || (config->ofi_provider != NULL && config->ofi_provider[0] != '\0');

    q->exclusivity = SX_TL_EXCL_EMULATED;
    if (!asked && !ofi_fabric_device_present()) {
        snprintf(q->detail, sizeof(q->detail),
                 "not queried: no fabric device in /sys/class/infiniband or /sys/class/cxi, "
                 "and udp beats libfabric's socket emulation; SX_TRANSPORTS=ofi forces it");
        return SX_ERR_NO_DEVICE;
    }
    if (config->net_devices != NULL && config->net_devices[0] != '\0') {
        /* The named domains, and the first one's entry for the rest. */
        char names[SX_TL_DEVICES][SX_TL_DEVICE_MAX];
        int n = ofi_scan_devices(config, names, SX_TL_DEVICES, domains, sizeof(domains));
        if (n < 0) {
            snprintf(q->detail, sizeof(q->detail), "%s", domains);
            return n;
        }
        sx_tl_config_t first = *config;
        first.device = names[0];
        rc = sx_ofi_pick(&first, &fi, q->detail, sizeof(q->detail));
    } else {
        rc = sx_ofi_pick(config, &fi, q->detail, sizeof(q->detail));
        if (rc == SX_OK)
            snprintf(domains, sizeof(domains), "%s", fi->domain_attr->name);
    }
    if (rc != SX_OK)
        return rc;
    const char *prov = fi->fabric_attr->prov_name;
    bool soft = sx_ofi_prov_is_software(prov);
    q->exclusivity = soft ? SX_TL_EXCL_EMULATED : SX_TL_EXCL_HW;
    snprintf(q->detail, sizeof(q->detail), "provider %s%s, fabric %s, domain%s %.96s, mtu %zu",
             prov, soft ? " (emulated on kernel sockets)" : "", fi->fabric_attr->name,
             strchr(domains, ',') != NULL ? "s" : "", domains, sx_ofi_mtu_of(fi));
    sx_ofi_lib.freeinfo(fi);
    return SX_OK;
}

int sx_ofi_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max)
{
    char text[SX_TL_DETAIL_MAX];

    /* Without the list there is nothing to choose: SX_BIND_ADDR rules. */
    if (config->net_devices == NULL || config->net_devices[0] == '\0')
        return 0;
    int n = ofi_scan_devices(config, names, max, text, sizeof(text));
    if (n < 0)
        sx_error("ofi", "%s", text);
    return n;
}
