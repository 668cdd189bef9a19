/*
 * ofi: datagrams over libfabric (issue 7).
 *
 * Each interface is one FI_EP_DGRAM endpoint with FI_MSG, opened on its own
 * fabric and domain, with its own address vector and two completion
 * queues: receives complete on one with a wait object (FI_WAIT_FD, the fd
 * the progress threads sleep on), sends on one without, so that a send
 * never signals a sleeper. A shard's token holder is the only caller, so
 * the domain asks for FI_THREAD_DOMAIN.
 *
 * Provider: config->ofi_provider (SX_OFI_PROVIDER), or the first that
 * fi_getinfo lists for these hints, which is libfabric's order of
 * preference (NIC providers before the socket emulations). Of its entries
 * the one whose source address is config->bind_addr (SX_BIND_ADDR, default
 * 127.0.0.1; a port there is bound too) is used when the provider speaks
 * sockaddr_in (udp, sockets); other providers take their first entry.
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
 * there are no devices and SX_BIND_ADDR rules, as before.
 * What is not implemented: providers that need FI_MSG_PREFIX (verbs, efa
 * and usnic datagrams) or local memory registration (FI_MR_LOCAL) are not
 * asked for, so fi_getinfo leaves them out. FI_CONTEXT and FI_CONTEXT2 are
 * supported: every operation that completes has its own context.
 *
 * Sends (caps.sync_send): the layer above reuses its buffers as soon as
 * post_send returns (handshake control messages, the shared ACK slots), so
 * every datagram is either injected (FI_INJECT, up to the provider's
 * inject_size: the provider copies it before fi_sendmsg returns) or copied
 * into a bounce buffer owned by the interface. Each send takes a slot of
 * tx_attr->size (at most OFI_TX_MAX) and gives it back when its completion
 * is read from the send queue, so the provider's queue never overflows;
 * with no slot free, post_send answers SX_ERR_AGAIN. Within a batch every
 * datagram but the last carries FI_MORE when the next one is known to go
 * out (valid, and a slot for it), a hint that lets a NIC provider ring its
 * doorbell once; providers without a use for it ignore it, and one that
 * refuses it (FI_EBADFLAGS) gets no more of it, for sends or receives.
 * Should a send after a FI_MORE one be refused (the provider's queue
 * full), the provider flushes at its next progress call.
 *
 * Socket buffers: the udp and sockets providers emulate datagrams on a
 * kernel socket whose buffers they leave at the system default, which
 * holds fewer than a hundred full datagrams. The interface finds that
 * socket by the address its endpoint is bound to and sizes it as the udp
 * transport sizes its own (config->rcvbuf, config->sndbuf: SX_RCVBUF,
 * SX_SNDBUF); without it a window's burst is mostly lost.
 *
 * Receives: OFI_RX_BYTES of buffers (OFI_RX_MIN to OFI_RX_MAX of them, at
 * most rx_attr->size), each one byte longer than the mtu, are posted at
 * open. poll reads completions in batches (fi_cq_read); the buffers it
 * hands up are posted again at the start of the next poll, which is what
 * keeps their data valid until then. A datagram that fills the extra byte
 * was longer than the mtu and is dropped (stats.rx_truncated), as is one
 * the provider reports as truncated (FI_ETRUNC): the udp provider cuts long
 * datagrams silently, so the spare byte is what tells.
 *
 * mtu: the endpoint's max_msg_size, capped at OFI_MTU_MAX. The udp
 * provider says 1472 (Ethernet's 1500 less the IPv4 and UDP headers) on
 * every interface, loopback included, so large messages cost many more
 * datagrams than over the udp transport.
 *
 * Blocking: wait_fd is the receive queue's wait object; arm calls
 * fi_trywait, which resets the provider's signal and says whether
 * completions are pending. poll also re-arms when it finds nothing, so
 * that the fd does not stay readable for callers that only use the fd
 * (sx_engine_fd).
 *
 * Address (the business-card bytes): one byte of libfabric address format
 * (enum fi_addr_format), then for FI_SOCKADDR_IN the port and the IPv4
 * address, both in network order (7 bytes in all), and for any other
 * format the provider's own name as fi_getname writes it. The provider's
 * name travels in the card beside the transport's (variant): peers must
 * use the same provider.
 *
 * Loading: libfabric is opened with dlopen on first use, not linked. Its
 * library pulls in every provider's dependencies (libpsm_infinipath,
 * libpsm2, libefa, ...), whose constructors cost about 200 ms at every
 * process start on these machines, and fi_getinfo's first call as much
 * again; a process that never selects ofi pays neither. The build still
 * finds libfabric with pkg-config, for its headers and to decide whether
 * to compile this file.
 */
#include "transports/transport.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <shardx.h>

#include "common/log.h"
#include "common/namelist.h"

#define OFI_LIBRARY       "libfabric.so.1"
#define OFI_API_VERSION   FI_VERSION(1, 9)
#define OFI_MTU_MAX       65000
#define OFI_TX_MAX        256 /* send slots */
#define OFI_RX_MIN        64  /* receive buffers: at least two poll batches */
#define OFI_RX_MAX        256
#define OFI_RX_BYTES      (4u << 20) /* receive buffer memory per interface */
#define OFI_BOUNCE_BYTES  (4u << 20) /* bounce buffer memory per interface */
#define OFI_CQ_BATCH      32         /* completions per fi_cq_read */
#define OFI_SEND_RETRIES  16
#define OFI_ADDR_IN_LEN   7 /* format, port, IPv4 address */
#define OFI_VARIANT_MAX   32
#define OFI_DEST_FREE_END UINT32_MAX

/* ------------------------------------------------------------------ */
/* The library, opened on first use                                    */

typedef struct ofi_lib {
    int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
    const char *(*strerror)(int errnum);
    uint32_t (*version)(void);
    char error[SX_TL_DETAIL_MAX]; /* why it could not be loaded; "" when loaded */
} ofi_lib_t;

static ofi_lib_t ofi_lib;
static pthread_once_t ofi_lib_once = PTHREAD_ONCE_INIT;

static void ofi_lib_load(void)
{
    /* Never closed: providers keep state (and threads, for some) for the
     * life of the process. */
    void *h = dlopen(OFI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        snprintf(ofi_lib.error, sizeof(ofi_lib.error), "cannot load %s: %s", OFI_LIBRARY,
                 why != NULL ? why : "unknown error");
        return;
    }
    /* dlsym returns void *; the standard way to turn it into a function
     * pointer is through memcpy of the object representation. */
#define OFI_SYM(field, name)                                                                  \
    do {                                                                                      \
        void *sym_ = dlsym(h, name);                                                          \
        if (sym_ == NULL) {                                                                   \
            snprintf(ofi_lib.error, sizeof(ofi_lib.error), "%s lacks %s", OFI_LIBRARY, name); \
            return;                                                                           \
        }                                                                                     \
        memcpy(&ofi_lib.field, &sym_, sizeof(sym_));                                          \
    } while (0)
    OFI_SYM(getinfo, "fi_getinfo");
    OFI_SYM(freeinfo, "fi_freeinfo");
    OFI_SYM(dupinfo, "fi_dupinfo");
    OFI_SYM(fabric, "fi_fabric");
    OFI_SYM(strerror, "fi_strerror");
    OFI_SYM(version, "fi_version");
#undef OFI_SYM
    uint32_t v = ofi_lib.version();
    if (v < OFI_API_VERSION) {
        snprintf(ofi_lib.error, sizeof(ofi_lib.error), "libfabric %u.%u is older than %u.%u",
                 FI_MAJOR(v), FI_MINOR(v), FI_MAJOR(OFI_API_VERSION), FI_MINOR(OFI_API_VERSION));
        return;
    }
    ofi_lib.error[0] = '\0';
}

/* SX_OK once libfabric is usable; else SX_ERR_NO_DEVICE with the reason. */
static int ofi_lib_get(char *why, size_t cap)
{
    (void)pthread_once(&ofi_lib_once, ofi_lib_load);
    if (ofi_lib.strerror == NULL || ofi_lib.error[0] != '\0') {
        snprintf(why, cap, "%s",
                 ofi_lib.error[0] != '\0' ? ofi_lib.error : "libfabric did not load");
        return SX_ERR_NO_DEVICE;
    }
    return SX_OK;
}

static const char *ofi_err(ssize_t rc)
{
    return ofi_lib.strerror((int)(rc < 0 ? -rc : rc));
}

/* ------------------------------------------------------------------ */
/* Choosing the provider and the entry                                  */

/* libfabric's emulations over kernel sockets; the udp transport does
 * the same work without the extra layer. */
static bool ofi_prov_is_software(const char *prov)
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

static const struct sockaddr_in *ofi_src_in(const struct fi_info *fi)
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
    struct fi_info *hints = ofi_lib.dupinfo(NULL);

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
    if (hints != NULL && ofi_lib.getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list) == 0) {
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
    ofi_lib.freeinfo(list);
    ofi_lib.freeinfo(hints);
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
        ofi_lib.freeinfo(hints);
        return SX_ERR_NO_MEMORY;
    }
    int frc = ofi_lib.getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
    ofi_lib.freeinfo(hints);
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
        ofi_lib.freeinfo(list);
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
        if (ofi_src_in(fi) != NULL)
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
        snprintf(text, text_len, "invalid SX_NET_DEVICES: %s", why);
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
            ofi_lib.freeinfo(list);
            return SX_ERR_NO_DEVICE;
        }
        if (off < text_len)
            off += (size_t)snprintf(text + off, text_len - off, "%s%s", off != 0 ? ", " : "",
                                    wanted[i]);
        if (n < max)
            snprintf(names[n], SX_TL_DEVICE_MAX, "%s", wanted[i]);
        n++;
    }
    ofi_lib.freeinfo(list);
    return (int)(n < max ? n : max);
}

/*
 * Finds the entry to open: returns a copy of it in *info_p (fi_freeinfo
 * it), or an error with the reason in @p why. With config->device (the
 * engine's choice among SX_NET_DEVICES) the entry is that domain's and
 * SX_BIND_ADDR is not read.
 */
static int ofi_pick(const sx_tl_config_t *config, struct fi_info **info_p, char *why, size_t cap)
{
    const char *bind = config->bind_addr != NULL ? config->bind_addr : "127.0.0.1";
    const char *device =
        config->device != NULL && config->device[0] != '\0' ? config->device : NULL;
    struct fi_info *list = NULL, *chosen = NULL;
    const char *prov = NULL;
    struct in_addr ip;
    uint16_t port = 0;
    int rc = ofi_lib_get(why, cap);

    if (rc != SX_OK)
        return rc;
    if (device == NULL) {
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
            ofi_lib.freeinfo(list);
            return SX_ERR_NO_DEVICE;
        }
    }

    /* Without a device: the entry bound where SX_BIND_ADDR says, for
     * providers on IPv4 sockets; the first otherwise. */
    bool sockets = false;
    char seen[96] = "";
    size_t seen_len = 0;
    for (struct fi_info *fi = list; fi != NULL && chosen == NULL; fi = fi->next) {
        if (!ofi_usable(fi) || strcmp(fi->fabric_attr->prov_name, prov) != 0)
            continue;
        const struct sockaddr_in *sin = ofi_src_in(fi);
        if (sin == NULL) {
            if (!ofi_format_is_sockaddr(fi->addr_format) && !sockets)
                chosen = fi;
            continue;
        }
        sockets = true;
        if (sin->sin_addr.s_addr == ip.s_addr) {
            chosen = fi;
        } else if (seen_len < sizeof(seen)) {
            char a[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &sin->sin_addr, a, sizeof(a));
            seen_len += (size_t)snprintf(seen + seen_len, sizeof(seen) - seen_len, "%s%s",
                                         seen_len ? ", " : "", a);
        }
    }
    if (chosen == NULL) {
        snprintf(why, cap, "provider %s has no endpoint on SX_BIND_ADDR %s (it has: %s)", prov,
                 bind, seen_len ? seen : "no IPv4 address");
        ofi_lib.freeinfo(list);
        return SX_ERR_INVALID_PARAM;
    }
    struct fi_info *copy = ofi_lib.dupinfo(chosen);
    ofi_lib.freeinfo(list);
    if (copy == NULL)
        return SX_ERR_NO_MEMORY;
    struct sockaddr_in *src = copy->addr_format == FI_SOCKADDR_IN ? copy->src_addr : NULL;
    if (src != NULL)
        src->sin_port = htons(port);
    *info_p = copy;
    return SX_OK;
}

static size_t ofi_mtu_of(const struct fi_info *fi)
{
    return fi->ep_attr->max_msg_size < OFI_MTU_MAX ? (size_t)fi->ep_attr->max_msg_size
                                                   : OFI_MTU_MAX;
}

static int ofi_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q)
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
        rc = ofi_pick(&first, &fi, q->detail, sizeof(q->detail));
    } else {
        rc = ofi_pick(config, &fi, q->detail, sizeof(q->detail));
        if (rc == SX_OK)
            snprintf(domains, sizeof(domains), "%s", fi->domain_attr->name);
    }
    if (rc != SX_OK)
        return rc;
    const char *prov = fi->fabric_attr->prov_name;
    bool soft = ofi_prov_is_software(prov);
    q->exclusivity = soft ? SX_TL_EXCL_EMULATED : SX_TL_EXCL_HW;
    snprintf(q->detail, sizeof(q->detail), "provider %s%s, fabric %s, domain%s %.96s, mtu %zu",
             prov, soft ? " (emulated on kernel sockets)" : "", fi->fabric_attr->name,
             strchr(domains, ',') != NULL ? "s" : "", domains, ofi_mtu_of(fi));
    ofi_lib.freeinfo(fi);
    return SX_OK;
}

static int ofi_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max)
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

/* ------------------------------------------------------------------ */
/* The interface                                                        */

typedef struct ofi_tx_slot {
    struct fi_context2 ctx; /* first: a completion's op_context is this */
    uint8_t *bounce;        /* mtu bytes, or NULL when everything is injected */
} ofi_tx_slot_t;

typedef struct ofi_rx_slot {
    struct fi_context2 ctx; /* first, as above */
    uint8_t *buf;           /* rx_len bytes */
} ofi_rx_slot_t;

typedef struct ofi_dest {
    fi_addr_t fi_addr;
    uint32_t next_free; /* link in the free list while !live */
    bool live;
} ofi_dest_t;

typedef struct ofi_iface {
    sx_tl_iface_t base;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *txcq, *rxcq;
    struct fid_ep *ep;
    int wait_fd;
    bool armed; /* fi_trywait succeeded and nothing completed since */
    bool use_more;

    /* The card address (layout above) and what it must match. */
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t addr_len;
    uint8_t addr_format;
    size_t raw_len; /* of the provider's own names */
    char variant[OFI_VARIANT_MAX];

    /* Destinations; slots are reused through a free list. */
    ofi_dest_t *dests;
    uint32_t ndests, cap, free_head;

    /* Sends. */
    size_t inject_size;
    size_t iov_limit;
    uint8_t *scratch; /* mtu bytes, to gather more iovecs than iov_limit */
    ofi_tx_slot_t *tx;
    uint8_t *tx_mem;
    unsigned ntx;
    unsigned *tx_free; /* stack of free slot indices */
    unsigned tx_nfree;

    /* Receives. */
    size_t rx_len; /* mtu + 1: the spare byte tells a truncated datagram */
    ofi_rx_slot_t *rx;
    uint8_t *rx_mem;
    unsigned nrx;
    unsigned *repost; /* slots to post again at the next poll */
    unsigned nrepost;
    uint64_t tx_errors, rx_errors;
} ofi_iface_t;

static void ofi_close(sx_tl_iface_t *iface);

static int ofi_fail(ofi_iface_t *o, const char *what, ssize_t rc)
{
    sx_error("ofi", "%s (provider %s): %s", what, o->variant, ofi_err(rc));
    return rc == -FI_ENOMEM ? SX_ERR_NO_MEMORY : SX_ERR_NO_DEVICE;
}

/* Posts receive slot @p i; FI_MORE when another follows at once. */
static int ofi_post_recv(ofi_iface_t *o, unsigned i, bool more)
{
    ofi_rx_slot_t *r = &o->rx[i];
    struct iovec v = {.iov_base = r->buf, .iov_len = o->rx_len};
    struct fi_msg m = {
        .msg_iov = &v, .desc = NULL, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &r->ctx};

    ssize_t rc = fi_recvmsg(o->ep, &m, more && o->use_more ? FI_MORE : 0);
    if (rc == -FI_EBADFLAGS && more && o->use_more) {
        /* A provider that refuses the hint: post without it from now on. */
        o->use_more = false;
        rc = fi_recvmsg(o->ep, &m, 0);
    }
    return rc == 0 ? SX_OK : (int)rc;
}

/* Posts what poll handed up last time; what the provider refuses waits. */
static void ofi_repost(ofi_iface_t *o)
{
    unsigned done = 0;

    while (done < o->nrepost) {
        int rc = ofi_post_recv(o, o->repost[done], done + 1 < o->nrepost);
        if (rc != SX_OK) {
            if (rc != -FI_EAGAIN)
                sx_debug("ofi", "posting a receive: %s", ofi_err(rc));
            break;
        }
        done++;
    }
    memmove(o->repost, o->repost + done, (o->nrepost - done) * sizeof(*o->repost));
    o->nrepost -= done;
}

static void ofi_tx_done(ofi_iface_t *o, void *ctx)
{
    ofi_tx_slot_t *s = ctx;
    if (s < o->tx || s >= o->tx + o->ntx || o->tx_nfree >= o->ntx)
        return; /* not one of ours: nothing to give back */
    o->tx_free[o->tx_nfree++] = (unsigned)(s - o->tx);
}

/* Reads send completions, giving their slots back. */
static void ofi_reap_tx(ofi_iface_t *o)
{
    struct fi_cq_msg_entry e[OFI_CQ_BATCH];

    while (o->tx_nfree < o->ntx) {
        size_t busy = o->ntx - o->tx_nfree;
        ssize_t n = fi_cq_read(o->txcq, e, busy < OFI_CQ_BATCH ? busy : OFI_CQ_BATCH);
        if (n == -FI_EAGAIN)
            break;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof(err));
            if (fi_cq_readerr(o->txcq, &err, 0) != 1)
                break;
            /* A datagram lost at the source: the layer above retransmits. */
            o->tx_errors++;
            sx_debug("ofi", "send failed: %s", ofi_err(err.err));
            ofi_tx_done(o, err.op_context);
            continue;
        }
        if (n < 0) {
            sx_warn("ofi", "reading send completions: %s", ofi_err(n));
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            ofi_tx_done(o, e[i].op_context);
    }
}

/*
 * The kernel socket under an endpoint of a provider that emulates
 * datagrams on sockets (udp, sockets), found by the address it is bound
 * to; -1 when there is none. Such providers offer no way to size their
 * socket buffers, and the default receive buffer (net.core.rmem_default,
 * 208 KiB here) holds fewer than a hundred full datagrams: a window's
 * burst overflows it and most of the burst is lost and retransmitted.
 */
static int ofi_find_socket(const struct sockaddr_in *bound)
{
    DIR *d = opendir("/proc/self/fd");
    int found = -1;

    if (d == NULL)
        return -1;
    for (struct dirent *de; found < 0 && (de = readdir(d)) != NULL;) {
        char *end = NULL;
        long fd = strtol(de->d_name, &end, 10);
        if (end == de->d_name || *end != '\0' || fd < 0 || fd == dirfd(d))
            continue;
        struct sockaddr_in sa;
        socklen_t salen = sizeof(sa);
        int type = 0;
        socklen_t tlen = sizeof(type);
        if (getsockname((int)fd, (struct sockaddr *)&sa, &salen) == 0 && salen == sizeof(sa) &&
            sa.sin_family == AF_INET && sa.sin_port == bound->sin_port &&
            sa.sin_addr.s_addr == bound->sin_addr.s_addr &&
            getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_DGRAM)
            found = (int)fd;
    }
    closedir(d);
    return found;
}

/* Asks for @p want bytes of one socket buffer, as the udp transport does:
 * SO_*BUFFORCE needs CAP_NET_ADMIN, the plain option is capped by
 * net.core.[rw]mem_max. */
static void ofi_set_buf(int fd, size_t want, int force_opt, int opt, const char *what)
{
    int val = want > INT_MAX / 2 ? INT_MAX / 2 : (int)want;

    if (want == 0)
        return;
    if (setsockopt(fd, SOL_SOCKET, force_opt, &val, sizeof(val)) != 0 &&
        setsockopt(fd, SOL_SOCKET, opt, &val, sizeof(val)) != 0)
        sx_debug("ofi", "setting %s to %d failed: %s", what, val, strerror(errno));
}

static void ofi_size_socket(ofi_iface_t *o, const sx_tl_config_t *config,
                            const struct sockaddr_in *bound)
{
    if (config->rcvbuf == 0 && config->sndbuf == 0)
        return;
    int fd = ofi_find_socket(bound);
    if (fd < 0) {
        sx_debug("ofi",
                 "provider %s: no socket of this process is bound to its endpoint's address; "
                 "its buffers keep the system defaults (net.core.rmem_default)",
                 o->variant);
        return;
    }
    ofi_set_buf(fd, config->rcvbuf, SO_RCVBUFFORCE, SO_RCVBUF, "SO_RCVBUF");
    ofi_set_buf(fd, config->sndbuf, SO_SNDBUFFORCE, SO_SNDBUF, "SO_SNDBUF");
    sx_debug("ofi", "provider %s: sized the buffers of its socket (fd %d)", o->variant, fd);
}

static void ofi_arm_now(ofi_iface_t *o)
{
    struct fid *f = &o->rxcq->fid;
    int rc = fi_trywait(o->fabric, &f, 1);

    /* A provider without trywait (-FI_ENOSYS) has nothing to reset. */
    o->armed = (rc == FI_SUCCESS || rc == -FI_ENOSYS);
}

static int ofi_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    char why[SX_TL_DETAIL_MAX];
    struct fi_info *fi = NULL;
    int status;
    ssize_t rc;

    if (config == NULL || iface_p == NULL)
        return SX_ERR_INVALID_PARAM;
    status = ofi_pick(config, &fi, why, sizeof(why));
    if (status != SX_OK) {
        sx_error("ofi", "%s", why);
        return status;
    }
    if (config->device != NULL && config->device[0] != '\0') {
        const struct sockaddr_in *src = ofi_src_in(fi);
        char ip[INET_ADDRSTRLEN] = "";
        if (src != NULL && inet_ntop(AF_INET, &src->sin_addr, ip, sizeof(ip)) != NULL)
            sx_info("ofi",
                    "shard %u: binding to %s, the IPv4 address of domain %s (SX_NET_DEVICES; "
                    "SX_BIND_ADDR is not used)",
                    config->shard, ip, config->device);
        else
            sx_info("ofi", "shard %u: domain %s (SX_NET_DEVICES)", config->shard, config->device);
    }
    ofi_iface_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        ofi_lib.freeinfo(fi);
        return SX_ERR_NO_MEMORY;
    }
    o->base.ops = &sx_tl_ofi_ops;
    o->info = fi;
    o->wait_fd = -1;
    o->free_head = OFI_DEST_FREE_END;
    o->use_more = true;
    snprintf(o->variant, sizeof(o->variant), "%s", fi->fabric_attr->prov_name);

    size_t mtu = ofi_mtu_of(fi);
    o->inject_size = fi->tx_attr->inject_size < mtu ? fi->tx_attr->inject_size : mtu;
    o->iov_limit = fi->tx_attr->iov_limit > 0 ? fi->tx_attr->iov_limit : 1;
    o->rx_len = mtu + 1;

    if ((rc = ofi_lib.fabric(fi->fabric_attr, &o->fabric, NULL)) != 0) {
        status = ofi_fail(o, "fi_fabric", rc);
        goto fail;
    }
    if ((rc = fi_domain(o->fabric, fi, &o->domain, NULL)) != 0) {
        status = ofi_fail(o, "fi_domain", rc);
        goto fail;
    }

    /* Slots and buffers. */
    o->ntx = fi->tx_attr->size < OFI_TX_MAX ? (unsigned)fi->tx_attr->size : OFI_TX_MAX;
    bool bounce = o->inject_size < mtu;
    if (bounce && o->ntx > OFI_BOUNCE_BYTES / mtu)
        o->ntx = OFI_BOUNCE_BYTES / mtu > 16 ? (unsigned)(OFI_BOUNCE_BYTES / mtu) : 16;
    o->nrx = OFI_RX_BYTES / o->rx_len;
    o->nrx = o->nrx < OFI_RX_MIN ? OFI_RX_MIN : o->nrx > OFI_RX_MAX ? OFI_RX_MAX : o->nrx;
    if (o->nrx > fi->rx_attr->size)
        o->nrx = (unsigned)fi->rx_attr->size;
    o->tx = calloc(o->ntx, sizeof(*o->tx));
    o->tx_free = calloc(o->ntx, sizeof(*o->tx_free));
    o->rx = calloc(o->nrx, sizeof(*o->rx));
    o->repost = calloc(o->nrx, sizeof(*o->repost));
    o->rx_mem = malloc(o->nrx * o->rx_len);
    o->tx_mem = bounce ? malloc(o->ntx * mtu) : NULL;
    o->scratch = o->iov_limit < SX_TL_IOV_MAX ? malloc(mtu) : NULL;
    if (o->tx == NULL || o->tx_free == NULL || o->rx == NULL || o->repost == NULL ||
        o->rx_mem == NULL || (bounce && o->tx_mem == NULL) ||
        (o->iov_limit < SX_TL_IOV_MAX && o->scratch == NULL)) {
        status = SX_ERR_NO_MEMORY;
        goto fail;
    }
    for (unsigned i = 0; i < o->ntx; i++) {
        o->tx[i].bounce = bounce ? o->tx_mem + (size_t)i * mtu : NULL;
        o->tx_free[i] = o->ntx - 1 - i;
    }
    o->tx_nfree = o->ntx;
    for (unsigned i = 0; i < o->nrx; i++)
        o->rx[i].buf = o->rx_mem + (size_t)i * o->rx_len;

    /* Queues: sends complete without a wait object, receives with one. */
    struct fi_cq_attr txa = {.size = o->ntx, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
    if ((rc = fi_cq_open(o->domain, &txa, &o->txcq, NULL)) != 0) {
        status = ofi_fail(o, "fi_cq_open (sends)", rc);
        goto fail;
    }
    struct fi_cq_attr rxa = {.size = o->nrx, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD};
    if ((rc = fi_cq_open(o->domain, &rxa, &o->rxcq, NULL)) != 0) {
        sx_warn("ofi",
                "provider %s offers no fd to wait on (%s); progress threads will wake on "
                "their timers only",
                o->variant, ofi_err(rc));
        rxa.wait_obj = FI_WAIT_NONE;
        if ((rc = fi_cq_open(o->domain, &rxa, &o->rxcq, NULL)) != 0) {
            status = ofi_fail(o, "fi_cq_open (receives)", rc);
            goto fail;
        }
    } else if ((rc = fi_control(&o->rxcq->fid, FI_GETWAIT, &o->wait_fd)) != 0) {
        sx_warn("ofi",
                "FI_GETWAIT on provider %s: %s; progress threads will wake on their "
                "timers only",
                o->variant, ofi_err(rc));
        o->wait_fd = -1;
    }
    struct fi_av_attr ava = {
        .type = fi->domain_attr->av_type != FI_AV_UNSPEC ? fi->domain_attr->av_type : FI_AV_TABLE,
        .count = 64};
    if ((rc = fi_av_open(o->domain, &ava, &o->av, NULL)) != 0) {
        status = ofi_fail(o, "fi_av_open", rc);
        goto fail;
    }

    if ((rc = fi_endpoint(o->domain, fi, &o->ep, NULL)) != 0) {
        status = ofi_fail(o, "fi_endpoint", rc);
        goto fail;
    }
    if ((rc = fi_ep_bind(o->ep, &o->av->fid, 0)) != 0 ||
        (rc = fi_ep_bind(o->ep, &o->txcq->fid, FI_TRANSMIT)) != 0 ||
        (rc = fi_ep_bind(o->ep, &o->rxcq->fid, FI_RECV)) != 0) {
        status = ofi_fail(o, "fi_ep_bind", rc);
        goto fail;
    }
    if ((rc = fi_enable(o->ep)) != 0) {
        status = ofi_fail(o, "fi_enable", rc);
        goto fail;
    }

    /* The card address. */
    uint8_t raw[256];
    size_t raw_len = sizeof(raw);
    if ((rc = fi_getname(&o->ep->fid, raw, &raw_len)) != 0) {
        status = ofi_fail(o, "fi_getname", rc);
        goto fail;
    }
    o->addr_format = (uint8_t)fi->addr_format;
    o->raw_len = raw_len;
    const struct sockaddr_in *sin = (const void *)raw;
    if (fi->addr_format == FI_SOCKADDR_IN && raw_len >= sizeof(*sin) &&
        sin->sin_family == AF_INET) {
        o->addr[0] = o->addr_format;
        memcpy(o->addr + 1, &sin->sin_port, 2);
        memcpy(o->addr + 3, &sin->sin_addr.s_addr, 4);
        o->addr_len = OFI_ADDR_IN_LEN;
        if (ofi_prov_is_software(o->variant))
            ofi_size_socket(o, config, sin);
    } else if ((unsigned)fi->addr_format < 256 && raw_len + 1 <= SX_TL_ADDR_MAX) {
        o->addr[0] = o->addr_format;
        memcpy(o->addr + 1, raw, raw_len);
        o->addr_len = raw_len + 1;
    } else {
        sx_error("ofi",
                 "provider %s names its endpoints with %zu bytes (format %u); a business card "
                 "has room for %d",
                 o->variant, raw_len, (unsigned)fi->addr_format, SX_TL_ADDR_MAX - 1);
        status = SX_ERR_UNSUPPORTED;
        goto fail;
    }

    /* Every receive buffer goes to the provider now. */
    for (unsigned i = 0; i < o->nrx; i++) {
        int prc = ofi_post_recv(o, i, i + 1 < o->nrx);
        if (prc != SX_OK) {
            status = ofi_fail(o, "posting receives", prc);
            goto fail;
        }
    }

    o->base.caps = (sx_tl_caps_t){
        .mtu = mtu,
        .inline_limit = o->inject_size,
        .tx_credits = o->ntx,
        .sync_send = 1,
    };
    char where[64] = "";
    if (o->addr_format == FI_SOCKADDR_IN) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, o->addr + 3, ip, sizeof(ip));
        snprintf(where, sizeof(where), " on %s:%u", ip,
                 (unsigned)ntohs((uint16_t)(o->addr[1] | o->addr[2] << 8)));
    }
    sx_debug("ofi",
             "shard %u: provider %s, fabric %s, domain %s%s, mtu %zu, inject %zu, %u send "
             "slots, %u receive buffers, wait fd %d",
             config->shard, o->variant, fi->fabric_attr->name, fi->domain_attr->name, where, mtu,
             o->inject_size, o->ntx, o->nrx, o->wait_fd);
    *iface_p = &o->base;
    return SX_OK;
fail:
    ofi_close(&o->base);
    return status;
}

static void ofi_close_fid(struct fid *fid, const char *what)
{
    if (fid == NULL)
        return;
    int rc = fi_close(fid);
    if (rc != 0)
        sx_debug("ofi", "closing the %s: %s", what, ofi_err(rc));
}

static void ofi_close(sx_tl_iface_t *iface)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (o == NULL)
        return;
    /* The endpoint first: it holds the queues and the address vector. */
    ofi_close_fid(o->ep != NULL ? &o->ep->fid : NULL, "endpoint");
    ofi_close_fid(o->av != NULL ? &o->av->fid : NULL, "address vector");
    ofi_close_fid(o->rxcq != NULL ? &o->rxcq->fid : NULL, "receive queue");
    ofi_close_fid(o->txcq != NULL ? &o->txcq->fid : NULL, "send queue");
    ofi_close_fid(o->domain != NULL ? &o->domain->fid : NULL, "domain");
    ofi_close_fid(o->fabric != NULL ? &o->fabric->fid : NULL, "fabric");
    if (o->info != NULL)
        ofi_lib.freeinfo(o->info);
    free(o->tx);
    free(o->tx_free);
    free(o->tx_mem);
    free(o->scratch);
    free(o->rx);
    free(o->repost);
    free(o->rx_mem);
    free(o->dests);
    free(o);
}

static int ofi_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (buf == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (*len_p < o->addr_len)
        return SX_ERR_TRUNCATED;
    memcpy(buf, o->addr, o->addr_len);
    *len_p = o->addr_len;
    return SX_OK;
}

static int ofi_addr_check(sx_tl_iface_t *iface, const void *addr, size_t len)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    const uint8_t *in = addr;

    if (addr == NULL || len < 2)
        return SX_ERR_INVALID_PARAM;
    if (in[0] != o->addr_format)
        return SX_ERR_PEER_UNREACHABLE;
    if (o->addr_format == FI_SOCKADDR_IN) {
        static const uint8_t zero[4] = {0};
        if (len != OFI_ADDR_IN_LEN || (in[1] == 0 && in[2] == 0) || memcmp(in + 3, zero, 4) == 0)
            return SX_ERR_INVALID_PARAM;
        return SX_OK;
    }
    /* Names of other formats have the provider's fixed length, except
     * strings. */
    if (o->addr_format != FI_ADDR_STR && len - 1 != o->raw_len)
        return SX_ERR_INVALID_PARAM;
    return SX_OK;
}

static void ofi_addr_str(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf, size_t cap)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    const uint8_t *in = addr;
    char ip[INET_ADDRSTRLEN];

    if (addr != NULL && len == OFI_ADDR_IN_LEN && in[0] == FI_SOCKADDR_IN &&
        inet_ntop(AF_INET, in + 3, ip, sizeof(ip)) != NULL) {
        snprintf(buf, cap, "ofi/%s %s:%u", o->variant, ip,
                 (unsigned)ntohs((uint16_t)(in[1] | in[2] << 8)));
        return;
    }
    if (addr == NULL || len < 1) {
        snprintf(buf, cap, "(malformed ofi address of %zu bytes)", len);
        return;
    }
    size_t off = (size_t)snprintf(buf, cap, "ofi address format %u:", (unsigned)in[0]);
    for (size_t i = 1; i < len && off + 3 < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%02x", in[i]);
}

static void ofi_variant(sx_tl_iface_t *iface, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ((ofi_iface_t *)iface)->variant);
}

static int ofi_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len, sx_tl_dest_t *dest_p)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    const uint8_t *in = addr;
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    uint32_t slot;

    if (dest_p == NULL)
        return SX_ERR_INVALID_PARAM;
    int rc = ofi_addr_check(iface, addr, len);
    if (rc != SX_OK)
        return rc;
    if (o->addr_format == FI_SOCKADDR_IN) {
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        memcpy(&sa.sin_port, in + 1, 2);
        memcpy(&sa.sin_addr.s_addr, in + 3, 4);
        rc = fi_av_insert(o->av, &sa, 1, &fa, 0, NULL);
    } else {
        rc = fi_av_insert(o->av, in + 1, 1, &fa, 0, NULL);
    }
    if (rc != 1) {
        char text[96];
        ofi_addr_str(iface, addr, len, text, sizeof(text));
        sx_debug("ofi", "fi_av_insert %s: %s", text, rc < 0 ? ofi_err(rc) : "not inserted");
        return rc == -FI_ENOMEM ? SX_ERR_NO_MEMORY : SX_ERR_PEER_UNREACHABLE;
    }

    if (o->free_head != OFI_DEST_FREE_END) {
        slot = o->free_head;
        o->free_head = o->dests[slot].next_free;
    } else {
        if (o->ndests == o->cap) {
            uint32_t cap = o->cap != 0 ? o->cap * 2 : 16;
            ofi_dest_t *d =
                cap > o->cap && cap < SX_TL_DEST_NONE ? realloc(o->dests, cap * sizeof(*d)) : NULL;
            if (d == NULL) {
                (void)fi_av_remove(o->av, &fa, 1, 0);
                return cap > o->cap ? SX_ERR_NO_MEMORY : SX_ERR_FULL;
            }
            o->dests = d;
            o->cap = cap;
        }
        slot = o->ndests++;
    }
    o->dests[slot] = (ofi_dest_t){.fi_addr = fa, .next_free = OFI_DEST_FREE_END, .live = true};
    *dest_p = slot;
    return SX_OK;
}

static void ofi_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (dest >= o->ndests || !o->dests[dest].live)
        return;
    /* Sends to it still in the provider's queue may go out or fail; their
     * slots come back with their completions either way. */
    int rc = fi_av_remove(o->av, &o->dests[dest].fi_addr, 1, 0);
    if (rc != 0)
        sx_debug("ofi", "fi_av_remove: %s", ofi_err(rc));
    o->dests[dest].live = false;
    o->dests[dest].next_free = o->free_head;
    o->free_head = dest;
}

/* Checks one tx; SX_OK with *len_p set, or why it is refused. */
static int ofi_check_tx(const ofi_iface_t *o, const sx_tl_tx_t *tx, size_t *len_p)
{
    size_t len = 0;

    if (tx->dest >= o->ndests || !o->dests[tx->dest].live || tx->iovcnt > SX_TL_IOV_MAX)
        return SX_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > o->base.caps.mtu - len)
            return SX_ERR_INVALID_PARAM;
        len += tx->iov[i].iov_len;
    }
    *len_p = len;
    return SX_OK;
}

static void ofi_gather(const sx_tl_tx_t *tx, uint8_t *to)
{
    size_t off = 0;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > 0)
            memcpy(to + off, tx->iov[i].iov_base, tx->iov[i].iov_len);
        off += tx->iov[i].iov_len;
    }
}

/* What a refused send means for the datagram it refused. */
static int ofi_send_status(ofi_iface_t *o, ssize_t rc)
{
    switch ((int)-rc) {
    case FI_EAGAIN:
    case FI_ENOBUFS:
    case FI_ENOMEM:
        return SX_ERR_AGAIN;
    case FI_EMSGSIZE:
    case FI_EINVAL:
        return SX_ERR_INVALID_PARAM;
    case FI_ENETUNREACH:
    case FI_EHOSTUNREACH:
    case FI_ENETDOWN:
    case FI_EADDRNOTAVAIL:
    case EHOSTDOWN:
    case EACCES:
    case EPERM:
        return SX_ERR_PEER_UNREACHABLE;
    default:
        sx_warn("ofi", "fi_sendmsg (provider %s): %s", o->variant, ofi_err(rc));
        return SX_ERR_IO;
    }
}

/* Sends one checked datagram of @p len bytes in a free slot. */
static int ofi_send_one(ofi_iface_t *o, const sx_tl_tx_t *tx, size_t len, bool more)
{
    unsigned idx = o->tx_free[--o->tx_nfree];
    ofi_tx_slot_t *s = &o->tx[idx];
    struct iovec one;
    struct fi_msg m = {.msg_iov = tx->iov,
                       .desc = NULL,
                       .iov_count = tx->iovcnt,
                       .addr = o->dests[tx->dest].fi_addr,
                       .context = &s->ctx};
    uint64_t flags = FI_COMPLETION | (more ? FI_MORE : 0);

    if (len <= o->inject_size) {
        /* The provider copies it before fi_sendmsg returns. */
        flags |= FI_INJECT;
        if (tx->iovcnt > o->iov_limit) {
            ofi_gather(tx, o->scratch);
            one = (struct iovec){.iov_base = o->scratch, .iov_len = len};
            m.msg_iov = &one;
            m.iov_count = 1;
        }
    } else {
        /* Ours until its completion is read. */
        ofi_gather(tx, s->bounce);
        one = (struct iovec){.iov_base = s->bounce, .iov_len = len};
        m.msg_iov = &one;
        m.iov_count = 1;
    }
    for (unsigned attempt = 0;; attempt++) {
        ssize_t rc = fi_sendmsg(o->ep, &m, flags);
        if (rc == 0)
            return SX_OK;
        if (rc == -FI_ECONNREFUSED && attempt < OFI_SEND_RETRIES) {
            /* A report about some earlier datagram, as over udp. */
            o->base.stats.tx_refused++;
            continue;
        }
        if (rc == -FI_EBADFLAGS && (flags & FI_MORE)) {
            /* A provider that refuses the hint: send without it from now on. */
            o->use_more = false;
            flags &= ~(uint64_t)FI_MORE;
            continue;
        }
        if (rc == -FI_EAGAIN && attempt == 0) {
            /* The provider's queue may only be waiting for completions to
             * be read: read them and try once more. */
            ofi_reap_tx(o);
            continue;
        }
        o->tx_free[o->tx_nfree++] = idx;
        return rc == -FI_ECONNREFUSED ? SX_ERR_AGAIN : ofi_send_status(o, rc);
    }
}

static int ofi_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                         unsigned *posted_p)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    unsigned done = 0;
    int status = SX_OK;
    size_t len = 0, next_len = 0;
    int next = count > 0 ? ofi_check_tx(o, &tx[0], &next_len) : SX_OK;

    if (o->tx_nfree < count)
        ofi_reap_tx(o);
    while (done < count) {
        status = next;
        len = next_len;
        if (status != SX_OK)
            break;
        if (o->tx_nfree == 0) {
            ofi_reap_tx(o);
            if (o->tx_nfree == 0) {
                status = SX_ERR_AGAIN;
                break;
            }
        }
        /* FI_MORE only when the next one is sure to follow. */
        next = done + 1 < count ? ofi_check_tx(o, &tx[done + 1], &next_len) : SX_ERR_NOT_FOUND;
        bool more = o->use_more && next == SX_OK && o->tx_nfree > 1;
        status = ofi_send_one(o, &tx[done], len, more);
        if (status != SX_OK)
            break;
        done++;
        if (next == SX_ERR_NOT_FOUND)
            next = SX_OK;
    }
    o->base.stats.tx_datagrams += done;
    if (status == SX_ERR_AGAIN)
        o->base.stats.tx_again++;
    if (posted_p != NULL)
        *posted_p = done;
    return status;
}

/* Reads one error completion from the receive queue. */
static void ofi_rx_error(ofi_iface_t *o)
{
    struct fi_cq_err_entry err;

    memset(&err, 0, sizeof(err));
    if (fi_cq_readerr(o->rxcq, &err, 0) != 1)
        return;
    ofi_rx_slot_t *r = err.op_context;
    if (r >= o->rx && r < o->rx + o->nrx && o->nrepost < o->nrx)
        o->repost[o->nrepost++] = (unsigned)(r - o->rx);
    if (err.err == FI_ETRUNC) {
        o->base.stats.rx_truncated++;
    } else if (err.err != FI_ECANCELED) {
        o->rx_errors++;
        sx_debug("ofi", "receive failed: %s", ofi_err(err.err));
    }
}

static int ofi_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    struct fi_cq_msg_entry e[OFI_CQ_BATCH];
    unsigned n = 0;
    bool any = false;

    /* The buffers handed up last time are the caller's no longer. */
    if (o->nrepost > 0)
        ofi_repost(o);
    if (o->tx_nfree < o->ntx)
        ofi_reap_tx(o);
    /* Keep half the buffers posted whatever the caller asks for. */
    unsigned cap = o->nrx > 1 ? o->nrx / 2 : 1;
    if (max > cap)
        max = cap;
    while (n < max) {
        size_t want = max - n < OFI_CQ_BATCH ? max - n : OFI_CQ_BATCH;
        ssize_t got = fi_cq_read(o->rxcq, e, want);
        if (got == -FI_EAGAIN)
            break;
        any = true;
        if (got == -FI_EAVAIL) {
            ofi_rx_error(o);
            continue;
        }
        if (got < 0) {
            sx_error("ofi", "reading receive completions (provider %s): %s", o->variant,
                     ofi_err(got));
            return SX_ERR_IO;
        }
        for (ssize_t i = 0; i < got; i++) {
            ofi_rx_slot_t *r = e[i].op_context;
            if (r < o->rx || r >= o->rx + o->nrx)
                continue; /* not one of ours */
            o->repost[o->nrepost++] = (unsigned)(r - o->rx);
            if (e[i].len > o->base.caps.mtu) {
                /* It filled the spare byte: longer than the mtu, cut. */
                o->base.stats.rx_truncated++;
                continue;
            }
            events[n++] = (sx_tl_event_t){
                .type = SX_TL_EV_RECV, .status = SX_OK, .data = r->buf, .len = e[i].len};
        }
    }
    if (any)
        o->armed = false;
    else if (!o->armed && o->wait_fd >= 0)
        ofi_arm_now(o);
    o->base.stats.rx_datagrams += n;
    return (int)n;
}

static int ofi_wait_fd(sx_tl_iface_t *iface)
{
    return ((ofi_iface_t *)iface)->wait_fd;
}

static int ofi_arm(sx_tl_iface_t *iface)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (o->wait_fd < 0 || o->armed)
        return SX_OK;
    ofi_arm_now(o);
    return o->armed ? SX_OK : SX_ERR_AGAIN;
}

const sx_tl_ops_t sx_tl_ofi_ops = {
    .name = "ofi",
    .exclusivity = SX_TL_EXCL_EMULATED,
    /* Loads libfabric and runs fi_getinfo (unless not named and no fabric
     * device is present); the provider decides the exclusivity; any
     * thread; may take a few hundred milliseconds the first time. */
    .query = ofi_query,
    /* Opens fabric, domain, queues, address vector and endpoint, and posts
     * the receive buffers; may block briefly. */
    .open = ofi_open,
    /* Closes the endpoint (cancelling posted receives) and the rest;
     * token holder. */
    .close = ofi_close,
    /* The encoded endpoint name; any thread. */
    .local_addr = ofi_local_addr,
    /* fi_av_insert after checking the format; token holder. */
    .addr_insert = ofi_addr_insert,
    .addr_str = ofi_addr_str,
    /* Checks the format without inserting; any thread. */
    .addr_check = ofi_addr_check,
    /* The provider's name; any thread. */
    .variant = ofi_variant,
    /* The domains SX_NET_DEVICES names that the provider has here (none
     * without the list); runs fi_getinfo; any thread; may block briefly. */
    .devices = ofi_devices,
    /* fi_av_remove; token holder. */
    .addr_remove = ofi_addr_remove,
    /* Injects or copies each datagram (sync_send) and posts it; token
     * holder; never blocks. */
    .post_send = ofi_post_send,
    /* Reposts the last poll's buffers, reaps send completions and reads
     * receive completions in batches; token holder; never blocks. */
    .poll = ofi_poll,
    /* The receive queue's wait object; any thread. */
    .wait_fd = ofi_wait_fd,
    /* fi_trywait; token holder. */
    .arm = ofi_arm,
};
