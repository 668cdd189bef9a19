/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Tests that rewrite a business card's connection offers (test_cpc,
 * test_cpc_rdmacm) find the offers section with this: after the 16-byte
 * header and every shard's length-prefixed address (engine/peer.c writes
 * the layout), a count and, per offer, id, priority, blob length and blob
 * (cpc_base.c). Included by one test file each; cmocka's assertions stop
 * a test on a card shorter than its own fields say.
 */
#ifndef SX_TESTS_CARD_UTIL_H
#define SX_TESTS_CARD_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Sets *start_p to where the offers section starts and *end_p to where it
 * ends. */
static void card_offer_span(const uint8_t *card, size_t len, size_t *start_p, size_t *end_p)
{
    unsigned n = (unsigned)(card[6] | card[7] << 8);
    size_t off = 16;
    for (unsigned i = 0; i < n; i++) {
        assert_true(off < len);
        off += 1 + (size_t)card[off];
    }
    assert_true(off < len);
    *start_p = off;
    unsigned count = card[off++];
    for (unsigned k = 0; k < count; k++) {
        assert_true(off + 3 <= len);
        off += 3 + (size_t)card[off + 2];
    }
    *end_p = off;
}

#endif /* SX_TESTS_CARD_UTIL_H */
