/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The sx_run launcher's side of the `sxrun` modex: a rendezvous server on
 * the launcher's OOB endpoint (id SX_OOB_ID_LAUNCHER). Ranks send RDV_PUT
 * with their blob; once all `size` ranks have, each gets RDV_ALL with every
 * blob. Fences: each rank sends RDV_FENCE with a round number counted from
 * 1; once all ranks have entered round k, each gets RDV_DONE k. A PUT or
 * FENCE that breaks the rules (rank out of range, a rank twice, a
 * size that disagrees, a malformed payload) is answered with RDV_ERROR
 * naming the fault, logged, and the server reports the job failed
 * (SX_ERR_PROTO). So is a rank that left (no connection from it is left)
 * while another waits for it, in a fence round it never entered or for
 * its blob: every rank gets RDV_ERROR and the status is
 * SX_ERR_PEER_UNREACHABLE.
 * Messages are described with their tags in oob.h.
 *
 * Threads: the server runs on its OOB endpoint's progress thread; these
 * calls are for the launcher's main thread.
 */
#ifndef SX_BOOTSTRAP_RENDEZVOUS_H
#define SX_BOOTSTRAP_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

typedef struct sx_rdv_server sx_rdv_server_t;

/** Opens a server for a job of @p size ranks listening on 127.0.0.1. */
int sx_rdv_server_open(uint32_t size, sx_rdv_server_t **srv_p);

/** The same listening on @p host (an IPv4 address or a name; not the
 *  wildcard, since the address is what ranks are told) port @p port (0:
 *  any): for ranks on other hosts (sx_run -H). */
int sx_rdv_server_open_at(uint32_t size, const char *host, uint16_t port, sx_rdv_server_t **srv_p);

/** "host:port" for SX_RUN_ADDR. */
int sx_rdv_server_address(sx_rdv_server_t *srv, char *buf, size_t len);

/** SX_OK while the job's rendezvous is healthy, or the error that broke it
 *  (a message was logged). Any thread. */
int sx_rdv_server_status(sx_rdv_server_t *srv);

/** Rank @p rank's process has ended (the launcher reaped it). One that
 *  spoke is watched (its connection's end says so after its last
 *  message); one that never spoke has left once sx_rdv_server_tick finds
 *  it still silent a grace later (its words may be on their way). The
 *  launcher's main thread. */
void sx_rdv_server_rank_ended(sx_rdv_server_t *srv, uint32_t rank);

/** Gives up on ranks that ended without a word a grace ago; the
 *  launcher's main loop, now and then. */
void sx_rdv_server_tick(sx_rdv_server_t *srv);

/** The launcher stops the job: ranks that go now are not reported as
 *  leaving. Any thread. */
void sx_rdv_server_quiesce(sx_rdv_server_t *srv);

/** The rank whose leaving failed the rendezvous (status
 *  SX_ERR_PEER_UNREACHABLE), else UINT32_MAX. Any thread. */
uint32_t sx_rdv_server_lost_rank(sx_rdv_server_t *srv);

void sx_rdv_server_close(sx_rdv_server_t *srv);

#endif /* SX_BOOTSTRAP_RENDEZVOUS_H */
