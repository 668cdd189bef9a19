/* SPDX-License-Identifier: BSD-3-Clause */
/* Authenticated datagrams; see auth.h. */
#include "shard/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <shardx.h>

#include "build_config.h"

#if SX_HAVE_SODIUM
#include <sodium.h>
#endif

bool sx_auth_available(void)
{
#if SX_HAVE_SODIUM
    return sodium_init() >= 0;
#else
    return false;
#endif
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool sx_auth_parse_key(const char *hex, uint8_t key[SX_AUTH_KEY_LEN])
{
    if (hex == NULL || strlen(hex) != 2 * SX_AUTH_KEY_LEN)
        return false;
    for (unsigned i = 0; i < SX_AUTH_KEY_LEN; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

int sx_auth_draw_key(uint8_t key[SX_AUTH_KEY_LEN])
{
    return getrandom(key, SX_AUTH_KEY_LEN, 0) == SX_AUTH_KEY_LEN ? SX_OK : SX_ERR_IO;
}

static void auth_tag(const uint8_t key[SX_AUTH_KEY_LEN], const uint8_t *data, size_t len,
                     uint8_t tag[SX_AUTH_TAG_LEN])
{
#if SX_HAVE_SODIUM
    crypto_shorthash_siphashx24(tag, data, len, key);
#else
    /* Unreachable: SX_AUTH is refused at creation without libsodium. */
    (void)key;
    (void)data;
    (void)len;
    memset(tag, 0, SX_AUTH_TAG_LEN);
#endif
}

void sx_auth_set_key(sx_auth_t *auth, const uint8_t key[SX_AUTH_KEY_LEN])
{
    static const char label[] = "shardx key id";
    uint8_t tag[SX_AUTH_TAG_LEN];

    memcpy(auth->key, key, SX_AUTH_KEY_LEN);
    auth_tag(key, (const uint8_t *)label, sizeof(label) - 1, tag);
    memcpy(auth->id, tag, SX_AUTH_ID_LEN);
    atomic_store_explicit(&auth->on, true, memory_order_release);
}

void sx_auth_seal(const sx_auth_t *auth, const uint8_t *data, size_t len, const uint8_t *data2,
                  size_t len2, uint8_t tag[SX_AUTH_TAG_LEN])
{
    if (len2 == 0) {
        auth_tag(auth->key, data, len, tag);
        return;
    }
    /* A fragment's header and slice (chan_pmtu.c; rare: only after the
     * path's MTU stepped down). libsodium's SipHash has no streaming
     * form, so the two are joined first. */
    uint8_t *joined = malloc(len + len2);
    if (joined == NULL) {
        memset(tag, 0, SX_AUTH_TAG_LEN); /* the peer drops it; retransmitted */
        return;
    }
    memcpy(joined, data, len);
    memcpy(joined + len, data2, len2);
    auth_tag(auth->key, joined, len + len2, tag);
    free(joined);
}

bool sx_auth_check(const sx_auth_t *auth, const uint8_t *dgram, size_t len)
{
    uint8_t tag[SX_AUTH_TAG_LEN];

    if (len < SX_AUTH_TAG_LEN)
        return false;
    auth_tag(auth->key, dgram, len - SX_AUTH_TAG_LEN, tag);
#if SX_HAVE_SODIUM
    return crypto_verify_16(tag, dgram + len - SX_AUTH_TAG_LEN) == 0;
#else
    return false;
#endif
}

void sx_auth_id_str(const uint8_t id[SX_AUTH_ID_LEN], char out[2 * SX_AUTH_ID_LEN + 1])
{
    for (unsigned i = 0; i < SX_AUTH_ID_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}
