/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A fake librdmacm for the rdmacm connection method's tests on machines
 * without an RDMA device (test_cpc_rdmacm_fake), in the manner of
 * fake_verbs.h: fake_rdmacm.c defines the rdma_* functions rdmacm.c calls,
 * so the test program's definitions take the place of librdmacm's, and it
 * runs on top of fake_verbs.c's devices.
 *
 * What it models, as rdmacm.c reads librdmacm's contract for RDMA_PS_UDP:
 * event channels whose fd is readable while events wait (a pipe), bind and
 * listen on the IPv4 addresses of the fake devices' ports (the IPv4-mapped
 * RoCE v2 GIDs, and what fake_cm_add_ip adds for IPoIB), address and route
 * resolution, SIDR: rdma_connect to a listener raises CONNECT_REQUEST on the
 * listener's channel with the request's private data (padded to the SIDR
 * REQ's 180 bytes), rdma_accept answers the client with ESTABLISHED
 * carrying the path (ah_attr from the listener's port), the queue pair
 * number given to rdma_accept, RDMA_UDP_QKEY and the answer's private data
 * (padded to 136 bytes), rdma_reject with REJECTED. Faults and hostile
 * peers are configured in fake_cm.
 *
 * It is strict where real librdmacm fails late or hangs: rdma_destroy_id
 * with events not acknowledged (librdmacm waits for them forever), an
 * event channel destroyed with identifiers on it, rdma_get_cm_event on a
 * blocking fd, calls out of order. The first breach goes to
 * fake_cm.violation. It cannot show how a real subnet manager or kernel
 * behaves.
 *
 * State is global and guarded by one mutex: read it with fake_cm_snapshot
 * while engines run; change it with fake_cm_set before they start or
 * through the helpers below.
 */
#ifndef SX_TESTS_FAKE_RDMACM_H
#define SX_TESTS_FAKE_RDMACM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/rdma_cma.h>

#define FAKE_CM_IPS 8

typedef struct fake_cm_world {
    /* IPv4 addresses of RDMA ports (network order), fake_verbs devices. */
    struct {
        uint32_t ip;
        int dev;
        uint8_t port;
    } ips[FAKE_CM_IPS];
    int nips;

    /* Behaviour. */
    bool no_device;     /* rdma_create_event_channel fails with ENODEV */
    int fail;           /* 0, or the event every client step ends in: ADDR_ERROR and ROUTE_ERROR at
                         * theirs, anything else (UNREACHABLE, DEVICE_REMOVAL, ...) in answer to
                         * rdma_connect */
    uint32_t fail_from; /* fail applies only to clients from this IPv4 address (network
                         * order); 0: to all */
    int fail_call;      /* the next call of this kind fails at once with fail_errno:
                         * 1 rdma_create_id, 2 rdma_resolve_addr, 3 rdma_resolve_route,
                         * 4 rdma_connect */
    int fail_errno;
    int fail_status;    /* that event's status */
    bool silent;        /* connects get no answer at all */
    bool hold;          /* events wait in a held list until fake_cm_release */
    uint8_t sl;         /* the SL paths report */
    bool ib_global;     /* InfiniBand paths carry a GRH (another subnet) */
    int req_tamper;     /* the request's private data in transit: 1 flips the magic */
    int rep_tamper;     /* the answer in transit: 1 flips the magic, 2 names shard 7,
                         * 3 the CM reports another queue pair than the answer, 4 sets
                         * the Q_Key's controlled bit */
    uint16_t next_port; /* ephemeral ports start here */

    /* What happened. */
    unsigned ids_created, ids_live, ids_destroyed, channels_live;
    unsigned resolves, connects, requests, accepts, rejects, established, held;
    unsigned ghost_answers; /* answers to fake_cm_inject_request */
    int ghost_event;        /* the last one: ESTABLISHED (accepted) or REJECTED */
    uint8_t ghost_priv[136];
    uint32_t ghost_qpn;
    char violation[256];
} fake_cm_world_t;

extern fake_cm_world_t fake_cm;

/** Forgets everything (nothing may be live) and takes the IPv4 address of
 *  every IPv4-mapped GID of fake_verbs' ports, next_port 40000, SL 0. */
void fake_cm_reset(void);

/** Adds an IPoIB-style address (dotted quad) for port @p port of fake
 *  device @p dev. */
void fake_cm_add_ip(const char *ip, int dev, uint8_t port);

/** Copies the state under the lock. */
void fake_cm_snapshot(fake_cm_world_t *out);

/** Runs @p fn on the state under the lock. */
void fake_cm_set(void (*fn)(fake_cm_world_t *w, void *arg), void *arg);

/** Delivers what fake_cm.hold kept back, and stops holding. */
void fake_cm_release(void);

/** Sends a SIDR request with @p priv (@p len bytes, as given) to the
 *  listener at @p ip : @p port from nobody in particular; the answer is
 *  recorded in ghost_* (wait for ghost_answers to grow). SX_OK, or -1 when
 *  nothing listens there. */
int fake_cm_inject_request(const char *ip, uint16_t port, const void *priv, size_t len);

#endif /* SX_TESTS_FAKE_RDMACM_H */
