/*
 * The transports built into this library, by name. The hardware ones (ofi,
 * verbs) join the table when their dependencies are found at build time.
 */
#include "transports/transport.h"

#include <string.h>

static const sx_tl_ops_t *const sx_tl_builtin[] = {
    &sx_tl_udp_ops,
    &sx_tl_self_ops,
    &sx_tl_fault_ops,
    &sx_tl_sink_ops,
};

const sx_tl_ops_t *sx_tl_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(sx_tl_builtin) / sizeof(sx_tl_builtin[0]); i++) {
        if (strcmp(sx_tl_builtin[i]->name, name) == 0)
            return sx_tl_builtin[i];
    }
    return NULL;
}
