/* SPDX-License-Identifier: BSD-3-Clause */
/* Status messages and names, generated from SX_STATUS_TABLE in shardx.h. */
#include <shardx.h>

SX_API const char *sx_strerror(int status)
{
    switch (status) {
#define SX_STATUS_MESSAGE_CASE_(name, value, message) \
    case (value):                                     \
        return (message);
        SX_STATUS_TABLE(SX_STATUS_MESSAGE_CASE_)
#undef SX_STATUS_MESSAGE_CASE_
    default:
        return "unknown status code";
    }
}

SX_API const char *sx_status_name(int status)
{
    switch (status) {
#define SX_STATUS_NAME_CASE_(name, value, message) \
    case (value):                                  \
        return #name;
        SX_STATUS_TABLE(SX_STATUS_NAME_CASE_)
#undef SX_STATUS_NAME_CASE_
    default:
        return "unknown";
    }
}
