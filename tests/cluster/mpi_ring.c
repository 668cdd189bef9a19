/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An MPI job that shows it ran across the hosts of a namespace cluster
 * (tests/cluster): `mpi_ring [IFNAME]`, one rank per host.
 *
 * Every rank reports its hostname and the IPv4 address of IFNAME (default
 * sx0); all of them must differ, so no two ranks share a UTS or a network
 * namespace. Then an MPI_Allreduce, a ring of MPI_Sendrecv from 1 byte to
 * 4 MiB (above and below every MTU, through the eager and the rendezvous
 * protocols of ob1) and a ping-pong between rank 0 and every other rank,
 * each checking its data. Last, each rank checks that IFNAME's transmit
 * counter grew by at least what the rank sent around the ring: the bytes
 * did go over the cluster's network, not over some other path. Rank 0
 * prints "mpi_ring: OK" when everything holds; any failure aborts the job.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NAME_LEN = 64, ADDR_LEN = 16, PINGS = 20 };

struct where {
    char host[NAME_LEN];
    char addr[ADDR_LEN];
};

static int rank, size;

static void fail(const char *what)
{
    fprintf(stderr, "mpi_ring: rank %d: FAILED: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* The first IPv4 address of ifname, or "" if it has none. */
static void if_addr(const char *ifname, char out[ADDR_LEN])
{
    struct ifaddrs *all, *a;

    out[0] = '\0';
    if (getifaddrs(&all) != 0)
        fail("getifaddrs");
    for (a = all; a; a = a->ifa_next) {
        if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && strcmp(a->ifa_name, ifname) == 0) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, out, ADDR_LEN);
            break;
        }
    }
    freeifaddrs(all);
}

/* IFNAME's transmit counter, from the sysfs of this rank's network namespace. */
static uint64_t tx_bytes(const char *ifname)
{
    char path[128];
    unsigned long long v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/tx_bytes", ifname);
    f = fopen(path, "r");
    if (!f || fscanf(f, "%llu", &v) != 1)
        fail("cannot read the interface's tx_bytes in /sys (is /sys this host's sysfs?)");
    fclose(f);
    return v;
}

static unsigned char pattern(int src, size_t len, size_t i)
{
    return (unsigned char)(src * 31 + len * 7 + i * 13);
}

int main(int argc, char **argv)
{
    const char *ifname = argc > 1 ? argv[1] : "sx0";
    const size_t max = 4u << 20;
    struct where me, *all;
    unsigned char *out, *in;
    uint64_t sent = 0, tx0;
    int i, j;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    memset(&me, 0, sizeof(me));
    if (gethostname(me.host, sizeof(me.host) - 1) != 0)
        fail("gethostname");
    if_addr(ifname, me.addr);
    if (!me.addr[0])
        fail("no IPv4 address on the cluster interface");
    all = calloc((size_t)size, sizeof(*all));
    if (!all)
        fail("out of memory");
    MPI_Allgather(&me, sizeof(me), MPI_BYTE, all, sizeof(me), MPI_BYTE, MPI_COMM_WORLD);
    for (i = 0; i < size; i++) {
        if (rank == 0)
            printf("mpi_ring: rank %d on %s, %s %s\n", i, all[i].host, ifname, all[i].addr);
        for (j = 0; j < i; j++)
            if (!strcmp(all[i].host, all[j].host) || !strcmp(all[i].addr, all[j].addr))
                fail("two ranks share a host");
    }

    long sum = 0, mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long)size * (size + 1) / 2)
        fail("MPI_Allreduce: wrong sum");

    out = malloc(max);
    in = malloc(max);
    if (!out || !in)
        fail("out of memory");
    tx0 = tx_bytes(ifname);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (size_t len = 1; len <= max; len *= 4) {
        for (size_t k = 0; k < len; k++)
            out[k] = pattern(rank, len, k);
        memset(in, 0, len);
        MPI_Sendrecv(out, (int)len, MPI_BYTE, next, 1, in, (int)len, MPI_BYTE, prev, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t k = 0; k < len; k++)
            if (in[k] != pattern(prev, len, k))
                fail("ring: wrong data");
        if (size > 1)
            sent += len;
    }

    /* Ping-pong, 64 KiB each way, between rank 0 and every other rank. */
    const int pp = 64 << 10;
    for (int peer = 1; peer < size; peer++) {
        double t0 = MPI_Wtime();
        for (i = 0; i < PINGS; i++) {
            if (rank == 0) {
                memset(out, i, (size_t)pp);
                MPI_Send(out, pp, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
                MPI_Recv(in, pp, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (int k = 0; k < pp; k++)
                    if (in[k] != (unsigned char)(i + 1))
                        fail("ping-pong: wrong data");
            } else if (rank == peer) {
                MPI_Recv(in, pp, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (int k = 0; k < pp; k++)
                    if (in[k] != (unsigned char)i)
                        fail("ping-pong: wrong data");
                memset(out, i + 1, (size_t)pp);
                MPI_Send(out, pp, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
            }
        }
        if (rank == 0)
            printf("mpi_ring: ping-pong 0 <-> %d: %d round trips of %d bytes, %.1f us each\n", peer,
                   PINGS, pp, (MPI_Wtime() - t0) * 1e6 / PINGS);
    }

    uint64_t tx = tx_bytes(ifname) - tx0;
    if (tx < sent) {
        fprintf(stderr,
                "mpi_ring: rank %d: %s sent %" PRIu64 " bytes, the ring alone %" PRIu64 "\n", rank,
                ifname, tx, sent);
        fail("the ring's data did not go over the cluster interface");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_ring: OK: %d ranks on %d hosts, allreduce, ring up to %zu bytes, ping-pong\n",
               size, size, max);
    free(in);
    free(out);
    free(all);
    MPI_Finalize();
    return 0;
}
