/* SPDX-License-Identifier: BSD-3-Clause */
/* The thread-local anchor behind sx_thread_self_id(). */
#include "locks/owner.h"

_Thread_local char sx_thread_anchor;
