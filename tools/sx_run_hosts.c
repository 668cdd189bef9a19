/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_run -H: the host list, where the ranks go, the address other hosts
 * reach the rendezvous server at, and the launcher agent's words.
 *
 * Placement is by block, in the order the hosts were given, like mpirun's
 * `--map-by slot`: a host written NAME:S takes S ranks (fewer if the job
 * runs out first); the ranks that the counted hosts do not take are shared
 * among the hosts written without a count, in contiguous blocks that differ
 * by at most one, the larger first. So `-H a,b,c -n 5` puts ranks 0-1 on
 * a, 2-3 on b, 4 on c; `-H a:1,b:3 -n 4` rank 0 on a and 1-3 on b. When
 * every host has a count, more ranks than their sum is an error and -n may
 * be left out (it is then the sum). A name may be listed more than once.
 *
 * A host is this machine when its name is `localhost` or the machine's
 * name (gethostname(), or that name up to its first dot); its ranks start
 * as without -H, not through the agent. Any other name, addresses like
 * 127.0.0.1 included, goes through the agent.
 */
#include "sx_run_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Letters, digits and . - _ @ (user@host, as ssh takes it); not starting
 * with '-', which an agent would read as an option. */
static bool sx_run_host_name_ok(const char *s, size_t len)
{
    if (len == 0 || s[0] == '-')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_' || c == '@';
        if (!ok)
            return false;
    }
    return true;
}

static bool sx_run_slots_parse(const char *s, size_t len, unsigned *slots_p)
{
    unsigned long v = 0;

    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned long)(s[i] - '0');
        if (v > SX_RUN_MAX_RANKS)
            return false;
    }
    if (v == 0)
        return false;
    *slots_p = (unsigned)v;
    return true;
}

bool sx_run_hosts_parse(const char *list, sx_run_host_t **hosts_p, unsigned *n_p)
{
    const char *p = list;

    if (list == NULL || *list == '\0') {
        sx_run_msg("-H needs a list of hosts (NAME[:SLOTS],...)");
        return false;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t nlen = colon != NULL ? (size_t)(colon - p) : len;
        unsigned slots = 0;

        if (!sx_run_host_name_ok(p, nlen)) {
            sx_run_msg("-H: '%.*s' is not a host name (letters, digits, '.', '-', '_', '@'; "
                       "NAME or NAME:SLOTS)",
                       (int)len, p);
            return false;
        }
        if (colon != NULL && !sx_run_slots_parse(colon + 1, len - nlen - 1, &slots)) {
            sx_run_msg("-H: '%.*s': the slots must be a number from 1 to %d", (int)len, p,
                       SX_RUN_MAX_RANKS);
            return false;
        }
        if (*n_p >= SX_RUN_MAX_RANKS) {
            sx_run_msg("-H: more than %d hosts", SX_RUN_MAX_RANKS);
            return false;
        }
        sx_run_host_t *hosts = realloc(*hosts_p, (*n_p + 1) * sizeof(*hosts));
        if (hosts == NULL) {
            sx_run_msg("out of memory");
            return false;
        }
        *hosts_p = hosts;
        hosts[*n_p] = (sx_run_host_t){.name = strndup(p, nlen), .slots = slots};
        if (hosts[*n_p].name == NULL) {
            sx_run_msg("out of memory");
            return false;
        }
        ++*n_p;
        if (comma == NULL)
            return true;
        p = comma + 1;
    }
}

void sx_run_hosts_free(sx_run_host_t *hosts, unsigned n)
{
    for (unsigned i = 0; hosts != NULL && i < n; i++)
        free(hosts[i].name);
    free(hosts);
}

unsigned sx_run_hosts_slots(const sx_run_host_t *hosts, unsigned n)
{
    unsigned sum = 0;

    for (unsigned i = 0; i < n; i++) {
        if (hosts[i].slots == 0)
            return 0;
        sum += hosts[i].slots;
    }
    return sum;
}

bool sx_run_hosts_place(sx_run_host_t *hosts, unsigned n, unsigned nranks, unsigned *rank_host)
{
    unsigned long fixed = 0;
    unsigned nfree = 0;

    for (unsigned i = 0; i < n; i++) {
        if (hosts[i].slots != 0)
            fixed += hosts[i].slots;
        else
            nfree++;
    }
    if (nfree == 0 && nranks > fixed) {
        sx_run_msg("-n %u: the hosts given (-H) have %lu slots; give more hosts or slots, or "
                   "a host without a count",
                   nranks, fixed);
        return false;
    }
    unsigned rest = nranks > fixed ? nranks - (unsigned)fixed : 0;
    unsigned k = 0, next = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned cap = hosts[i].slots;
        if (cap == 0) {
            cap = rest / nfree + (k < rest % nfree ? 1 : 0);
            k++;
        }
        unsigned take = nranks - next < cap ? nranks - next : cap;
        hosts[i].nranks = take;
        for (unsigned j = 0; j < take; j++)
            rank_host[next++] = i;
    }
    return next == nranks;
}

void sx_run_hosts_mark_local(sx_run_host_t *hosts, unsigned n)
{
    char me[256];

    if (gethostname(me, sizeof(me)) != 0)
        me[0] = '\0';
    me[sizeof(me) - 1] = '\0';
    size_t mlen = strcspn(me, ".");
    for (unsigned i = 0; i < n; i++) {
        const char *h = hosts[i].name;
        hosts[i].local = strcmp(h, "localhost") == 0 ||
                         (me[0] != '\0' &&
                          (strcmp(h, me) == 0 ||
                           /* "node1" here and "node1.example.org" there, or the
                            * reverse: the same name up to the first dot. */
                           (strncmp(h, me, mlen) == 0 && (me[mlen] == '\0' || h[mlen] == '\0') &&
                            (h[mlen] == '\0' || h[mlen] == '.'))));
    }
}

/* --------------------------------------------------- the rendezvous address */

/* The address this machine's kernel would send from to reach @p name: a
 * UDP socket connected there (nothing is sent) says it in getsockname(). */
static bool sx_run_source_addr(const char *name, char *buf, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM};
    struct addrinfo *res = NULL;
    bool found = false;

    if (getaddrinfo(name, "9", &hints, &res) != 0)
        return false;
    for (struct addrinfo *ai = res; ai != NULL && !found; ai = ai->ai_next) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 &&
            sa.sin_addr.s_addr != htonl(INADDR_ANY) &&
            inet_ntop(AF_INET, &sa.sin_addr, buf, (socklen_t)len) != NULL)
            found = true;
        close(fd);
    }
    freeaddrinfo(res);
    return found;
}

int sx_run_rdv_bind(const sx_run_host_t *hosts, unsigned n, const char *opt, char *host,
                    size_t hostlen, uint16_t *port_p)
{
    *port_p = 0;
    if (opt != NULL) {
        const char *colon = strrchr(opt, ':');
        size_t hlen = colon != NULL ? (size_t)(colon - opt) : strlen(opt);
        if (colon != NULL) {
            unsigned long port = 0;
            const char *q = colon + 1;
            for (; *q >= '0' && *q <= '9' && port <= 65535; q++)
                port = port * 10 + (unsigned long)(*q - '0');
            if (*q != '\0' || q == colon + 1 || port == 0 || port > 65535) {
                sx_run_msg("--rendezvous-addr: '%s': the port must be a number from 1 to 65535",
                           opt);
                return SX_RUN_EXIT_USAGE;
            }
            *port_p = (uint16_t)port;
        }
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        if (hlen == 0 || hlen >= hostlen || memchr(opt, ':', hlen) != NULL) {
            sx_run_msg("--rendezvous-addr: '%s' is not HOST or HOST:PORT (IPv4)", opt);
            return SX_RUN_EXIT_USAGE;
        }
        memcpy(host, opt, hlen);
        host[hlen] = '\0';
        if (getaddrinfo(host, NULL, &hints, &res) != 0) {
            sx_run_msg("--rendezvous-addr: '%s' is not an IPv4 address or a host name that "
                       "resolves to one",
                       host);
            return SX_RUN_EXIT_USAGE;
        }
        freeaddrinfo(res);
        return 0;
    }

    bool remote = false;
    for (unsigned i = 0; i < n; i++) {
        if (hosts[i].local || hosts[i].nranks == 0)
            continue;
        remote = true;
        const char *name = strchr(hosts[i].name, '@');
        name = name != NULL ? name + 1 : hosts[i].name;
        if (sx_run_source_addr(name, host, hostlen))
            return 0;
    }
    if (!remote) {
        snprintf(host, hostlen, "127.0.0.1");
        return 0;
    }
    sx_run_msg("cannot tell which address of this machine the other hosts reach: none of them "
               "resolves to an IPv4 address with a route from here; give it with "
               "--rendezvous-addr ADDR");
    return SX_RUN_EXIT_INTERNAL;
}

/* ------------------------------------------------------------------- agent */

void sx_run_words_free(char **words)
{
    for (size_t i = 0; words != NULL && words[i] != NULL; i++)
        free(words[i]);
    free(words);
}

char **sx_run_agent_split(const char *cmd)
{
    size_t n = 0, cap = 4;
    char **words = calloc(cap, sizeof(char *));

    if (words == NULL) {
        sx_run_msg("out of memory");
        return NULL;
    }
    for (const char *p = cmd; *p != '\0';) {
        p += strspn(p, " \t");
        size_t len = strcspn(p, " \t");
        if (len == 0)
            break;
        if (n + 2 > cap) {
            cap *= 2;
            char **w = realloc(words, cap * sizeof(char *));
            if (w == NULL) {
                sx_run_words_free(words);
                sx_run_msg("out of memory");
                return NULL;
            }
            words = w;
        }
        words[n] = strndup(p, len);
        words[n + 1] = NULL;
        if (words[n++] == NULL) {
            sx_run_words_free(words);
            sx_run_msg("out of memory");
            return NULL;
        }
        p += len;
    }
    if (n == 0) {
        free(words);
        sx_run_msg("--agent needs a command (e.g. ssh, or \"ssh -x\")");
        return NULL;
    }
    return words;
}
