/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A fake libibverbs for the verbs transport's tests on machines without an
 * RDMA device (test_transport_verbs_fake, the conformance suite's
 * test_transport_conformance_verbs_fake, and under fake_rdmacm.c
 * test_cpc_rdmacm_fake). fake_verbs.c defines the ibv_*
 * functions verbs.c calls, so the test program's own definitions take the
 * place of libibverbs', and models in memory what the transport relies
 * on: devices and ports as configured below, UD queue pairs that deliver
 * to each other through address handles (with the GRH room in front of
 * every receive), completion queues of exactly the requested depth, a
 * completion channel and asynchronous events on real pipes, and memory
 * registrations that every non-inline send must fall within.
 *
 * It is strict where the transport must be careful and a real device
 * would fail late or silently: a full completion queue, a send over the
 * inline limit or the MTU, memory outside a registration, a queue over
 * its depth, a queue pair used in the wrong state, a completion queue
 * destroyed with events unacknowledged, resources left at close. Each is
 * recorded in fake.violation (the first one) for the test to assert
 * empty. What it cannot show is how real hardware behaves; it checks the
 * transport against the verbs contract as the code reads it.
 *
 * All state is global and guarded by one mutex; reset it with fake_reset.
 */
#ifndef SX_TESTS_FAKE_VERBS_H
#define SX_TESTS_FAKE_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define FAKE_DEVS  4
#define FAKE_PORTS 2
#define FAKE_GIDS  8

typedef struct fake_gid {
    bool valid;
    int type; /* enum ibv_gid_type */
    uint8_t raw[16];
} fake_gid_t;

typedef struct fake_port {
    enum ibv_port_state state;
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    uint16_t lid;
    enum ibv_mtu mtu;
    int gid_len;
    fake_gid_t gid[FAKE_GIDS];
} fake_port_t;

typedef struct fake_dev {
    char name[64];
    int nports;
    fake_port_t port[FAKE_PORTS]; /* port[0] is port 1 */
    int max_qp_wr, max_cqe, max_sge;
    uint32_t max_inline; /* a queue pair asking for more is refused */
} fake_dev_t;

typedef struct fake_world {
    /* What the machine has; fake_reset sets one InfiniBand device. */
    int ndevs;
    fake_dev_t dev[FAKE_DEVS];
    bool no_kernel;          /* ibv_get_device_list fails with ENOSYS */
    bool gid_ex_unsupported; /* _ibv_query_gid_ex answers EOPNOTSUPP */

    /* Faults for the next operations. */
    int next_send_status; /* the next send completes with this (not IBV_WC_SUCCESS) */
    int next_recv_status; /* the next delivered receive completes with this */
    bool fail_ah;         /* ibv_create_ah fails with EHOSTUNREACH */
    bool hold;            /* deliveries wait until the receiver's next req_notify */
    bool defer_sends;     /* send completions wait for fake_complete_sends */

    /* What happened. */
    unsigned live_contexts, live_pds, live_cqs, live_qps, live_mrs, live_ahs, live_channels;
    unsigned ahs_created;
    unsigned post_send_calls, sends, recvs_posted, post_recv_calls;
    unsigned dropped_no_recv, dropped_route;
    struct ibv_ah_attr last_ah; /* the attributes of the last ibv_create_ah */
    char violation[256];        /* the first breach of the verbs contract; "" if none */
} fake_world_t;

extern fake_world_t fake;

/** Forgets everything (no resource may be live) and configures one
 *  InfiniBand device "mlx5_0", port 1 ACTIVE, LID 0x11, MTU 4096. */
void fake_reset(void);

/** Adds a RoCE device @p name with port 1 ACTIVE at MTU 1024, whose GID
 *  table holds link-local and IPv4-mapped (10.0.0.@p host) GIDs, RoCE v1
 *  and v2 each; returns its index. */
int fake_add_roce(const char *name, uint8_t host);

/** Raises an asynchronous event of @p type on every open context. */
void fake_async_all(enum ibv_event_type type);

/** Moves every queue pair to the error state: their posted receives
 *  complete with IBV_WC_WR_FLUSH_ERR. */
void fake_qp_error_all(void);

/** Delivers what fake.hold kept back, without completion events. */
void fake_release_held(void);

/** Queues the send completions fake.defer_sends kept back. */
void fake_complete_sends(void);

/** The fake's verdict after a test: writes to @p buf, and returns it, ""
 *  when the verbs contract was kept and nothing is left allocated, else
 *  the first breach or what is left. */
const char *fake_verdict(char *buf, size_t cap);

#endif /* SX_TESTS_FAKE_VERBS_H */
