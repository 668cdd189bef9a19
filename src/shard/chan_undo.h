/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A channel's loss episodes (chan_cc.c): the calls with which the ACK
 * path tells its destination host's controller of a loss, and decides
 * whether the halving it made was spurious (every packet its episode
 * resent reported twice: D-SACK, RFC 2883; RFC 3708 section 3's test,
 * RFC 4015's response). The callers, in order: a loss (chan_retransmit.c's
 * RACK and timeouts through sx_chan_cc_lost_locked, chan_tlp.c's repair),
 * each resend (chan_tx.c's flush), each duplicate report and the end of
 * its ACK (chan_retransmit.c).
 *
 * Apart from chan_int.h, where the rest of the channel's congestion calls
 * are, so that a unit test (tests/unit/test_chan_cc.c) can stage one
 * packet's copies in an order no real network can be made to produce on
 * demand, on a bare channel.
 *
 * Synchronization: as chan.h; the holder of the channel's shard token.
 */
#ifndef SX_SHARD_CHAN_UNDO_H
#define SX_SHARD_CHAN_UNDO_H

#include <stdbool.h>
#include <stdint.h>

#include "shard/chan.h"

/** A loss of packet @p seq, last sent at @p sent_ns, that is not in the
 *  pipe (sx_chan_cc_lost_locked takes a packet out of it first); @p
 *  resent: a copy of it already went again (a tail loss probe's, which
 *  repaired it). The first loss of a round halves the window and opens
 *  its episode; a persistent one collapses it (shard/cc.h). */
void sx_chan_cc_cut_locked(sx_chan_t *c, uint64_t sent_ns, uint32_t seq, bool resent,
                           bool persistent, uint64_t now);
/** Packet @p seq goes again: one more copy the loss episode of our last
 *  halving must see reported twice before that halving is undone; a
 *  packet it resent already ends the episode (the halving stands). */
void sx_chan_cc_resent_locked(sx_chan_t *c, uint32_t seq);
/** The peer reported packet @p seq twice (SX_PKTF_DSACK): one resend of
 *  our halving's episode fewer to hear of. */
void sx_chan_cc_dsack_locked(sx_chan_t *c, uint32_t seq);
/** At the end of an ACK's processing: where reports have covered every
 *  resend of our halving's episode, and nothing waits to be resent nor a
 *  timeout's recovery runs, the halving was spurious and is undone
 *  (sx_cc_undo_loss); the episode ends either way once covered. */
void sx_chan_cc_undo_try_locked(sx_chan_t *c);

#endif
