/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the business card parser (src/engine/card.c): the
 * bytes a launcher, a modex or a peer hands to sx_peer_add. Each input is
 * one card given to a live engine; one that is accepted is removed again
 * at once, so every input starts from the same engine. Run it with
 * scripts/fuzz.sh; the seed corpus (fuzz/corpus-card/) holds real cards
 * that make-corpus.sh took from engines: one with IPv4 addresses only, one
 * with IPv6 ones too, one of an engine bound to one address, and two with
 * SX_AUTH (a key's id; a job key). Each input goes to two engines, one
 * without SX_AUTH and one with the key of the auth-key seed, so that the
 * cards of both kinds are accepted by one of them and parsed to the end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <shardx.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sx_engine_h engines[2]; /* without SX_AUTH, with */
static uint64_t next_id = 1;

static void die(const char *what, int rc)
{
    fprintf(stderr, "fuzz_card: %s: %s\n", what, sx_strerror(rc));
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* No service thread, no connection attempt: sx_peer_add only parses
     * and checks; channels are made on first use, which never comes. */
    const sx_config_kv_t kv[] = {{"SHARDS", "1"},
                                 {"LOG_LEVEL", "error"},
                                 {"SERVICE_US", "0"},
                                 {"AUTH", "000102030405060708090a0b0c0d0e0f"}};
    for (unsigned i = 0; i < 2; i++) {
        sx_engine_params_t params = {
            .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 3 + i};
        int rc = sx_engine_create(&params, &engines[i]);
        if (rc != SX_OK)
            die("sx_engine_create", rc);
    }
    return 0;
}

static void one_engine(sx_engine_h engine, const uint8_t *data, size_t size)
{
    /* An exact-size copy: the parser may read only these bytes. */
    uint8_t *card = malloc(size ? size : 1);
    if (card == NULL)
        abort();
    for (size_t i = 0; i < size; i++)
        card[i] = data[i];
    sx_peer_h peer = NULL;
    int rc = sx_peer_add(engine, next_id++, card, size, &peer);
    free(card);
    if (rc == SX_OK) {
        if (peer == NULL)
            abort(); /* accepted without a handle */
        rc = sx_peer_remove(engine, peer);
        if (rc != SX_OK)
            die("sx_peer_remove", rc);
    } else if (peer != NULL) {
        abort(); /* refused, yet a handle came back */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one_engine(engines[0], data, size);
    one_engine(engines[1], data, size);
    return 0;
}
