/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Single-copy put and get between ranks of one host (btl_shardx_cma).
 *
 * Why. Over shardx's datagrams a put or get between two processes of one
 * host costs two kernel copies (into the socket, out of it) and needs the
 * target's shard to run: an emulated get is answered by the target's CPU.
 * With four ranks on two cores the target is often not running, and a
 * 1 MiB MPI_Allreduce stayed at 1.4-1.9 times the tcp BTL's time (issue
 * 22; docs/tuning.md, "Single copy between ranks of one host"). Linux's
 * cross-memory attach (process_vm_readv(2) and process_vm_writev(2), since
 * 3.2) copies between two address spaces in one step, without the target,
 * as Open MPI's vader BTL and UCX's cma transport do for the same reason.
 *
 * When. Only where ob1's contract makes it safe and the kernel lets us:
 *  - the peer is on this node in Open MPI's eyes (OPAL_PROC_ON_LOCAL_NODE)
 *    and its registration handle carries this host's identity: the boot id
 *    and the pid namespace, so a pid is never read in another kernel or
 *    another namespace (containers, namespace hosts that Open MPI thinks
 *    are one node);
 *  - the range lies inside the region the handle names, with the access
 *    right the operation needs, as shardx itself checks at the target;
 *  - the region is registered: ob1 keeps it so until the FIN that follows
 *    the operation's completion, which is what the datagram path relies on
 *    too (a target that deregisters early gets SX_ERR_ACCESS there, and
 *    EFAULT here, and then the datagram path's answer).
 * Anything else, or a copy that fails, goes through shardx unchanged: the
 * kernel's refusal (EPERM: ptrace access mode, Yama; ENOSYS: a kernel
 * without CMA, or a seccomp filter) turns single copy off for the process
 * and says so at verbosity 1; a vanished process or an unmapped page
 * (ESRCH, EFAULT) sends that one operation through shardx, which reports
 * what it finds. A put or get already written in part is written again
 * whole there, so nothing is lost either way.
 *
 * Completion runs in the caller's thread before put or get returns, as
 * vader's does: ob1 allows it (its completion callbacks may start the next
 * operation, which never recurses deeper than its fragments).
 */
#include "btl_shardx.h"

#include "opal/util/output.h"
#include "opal/util/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* FNV-1a, 64 bits: the host identity only has to differ between kernels
 * and pid namespaces, not resist anyone (a rank could read its peers'
 * memory through ptrace anyway). */
static uint64_t shardx_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

uint64_t mca_btl_shardx_cma_host_id(void)
{
    char boot[64];
    struct stat ns;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, boot, sizeof(boot));
    close(fd);
    if (n <= 0 || stat("/proc/self/ns/pid", &ns) != 0)
        return 0;
    uint64_t h = shardx_fnv(1469598103934665603ull, boot, (size_t)n);
    h = shardx_fnv(h, &ns.st_dev, sizeof(ns.st_dev));
    h = shardx_fnv(h, &ns.st_ino, sizeof(ns.st_ino));
    return h | 1; /* 0 means "no single copy" in a handle */
}

/*
 * Yama (ptrace_scope 1, Ubuntu's default) lets a process read another's
 * memory only if it is an ancestor of it, and the ranks mpirun starts are
 * siblings: every copy would fail with EPERM. Unless the target names who
 * may: PR_SET_PTRACER_ANY lets any process that the usual checks allow
 * (our user, same namespace), as Open MPI's vader does for its own single
 * copy. Scope 0 needs nothing, and 2 and 3 allow nothing a process can
 * change: there the first copy's EPERM turns single copy off.
 */
void mca_btl_shardx_cma_allow_peers(int output)
{
    char scope = 0;
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return; /* no Yama */
    ssize_t n = read(fd, &scope, 1);
    close(fd);
    if (n != 1 || scope != '1')
        return;
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        opal_output_verbose(1, output,
                            "btl shardx: Yama's ptrace_scope is 1 and PR_SET_PTRACER failed (%s): "
                            "the other ranks of this host may not copy from this one",
                            strerror(errno));
}

void mca_btl_shardx_cma_fill(mca_btl_base_registration_handle_t *h, const void *base, size_t len,
                             unsigned access)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;

    h->base = (uint64_t)(uintptr_t)base;
    h->len = len;
    h->access = access;
    h->pid = c->cma_pid;
    h->host = c->cma_host; /* 0 with btl_shardx_cma 0 */
}

/* Whether @p h (copied out of the PML header) lets this process copy
 * [raddr, raddr + size) of @p ep's memory by itself. */
static bool shardx_cma_allowed(const mca_btl_base_endpoint_t *ep,
                               const mca_btl_base_registration_handle_t *h, uint64_t raddr,
                               size_t size, unsigned access)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;

    if (c->cma_host == 0 || atomic_load_explicit(&c->cma_refused, memory_order_relaxed))
        return false;
    if (ep->proc == NULL || !OPAL_PROC_ON_LOCAL_NODE(ep->proc->proc_flags))
        return false;
    if (h->host != c->cma_host || h->pid == 0 || (h->access & access) != access)
        return false;
    /* Inside the region, written so that nothing can overflow. */
    return raddr >= h->base && size <= h->len && raddr - h->base <= h->len - size;
}

uint32_t mca_btl_shardx_cma_owner(const mca_btl_base_endpoint_t *ep,
                                  const mca_btl_base_registration_handle_t *remote_handle,
                                  uint64_t raddr, size_t size, bool write)
{
    mca_btl_base_registration_handle_t h;

    /* The remote handle sits in a PML header and may be unaligned. */
    memcpy(&h, remote_handle, sizeof(h));
    if (!shardx_cma_allowed(ep, &h, raddr, size, write ? SX_MEM_REMOTE_WRITE : SX_MEM_REMOTE_READ))
        return 0;
    return h.pid;
}

int mca_btl_shardx_cma_move(uint32_t pid, void *local, uint64_t raddr, size_t size, bool write)
{
    size_t done = 0;

    while (done < size) {
        struct iovec l = {.iov_base = (char *)local + done, .iov_len = size - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = size - done};
        ssize_t n = write ? process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0)
                          : process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        int err = n < 0 ? errno : EFAULT; /* 0 bytes: the next page is not mapped */
        if (err == EINTR)
            continue;
        if (err == EPERM || err == ENOSYS) {
            if (!atomic_exchange(&mca_btl_shardx_component.cma_refused, true))
                opal_output_verbose(1, mca_btl_shardx_component.output,
                                    "btl shardx: %s refused (%s): put and get between ranks of "
                                    "this host go through shardx's datagrams from now on",
                                    write ? "process_vm_writev" : "process_vm_readv",
                                    strerror(err));
        } else {
            opal_output_verbose(5, mca_btl_shardx_component.output,
                                "btl shardx: %s of %zu bytes %s pid %u stopped after %zu (%s): "
                                "this one goes through shardx",
                                write ? "process_vm_writev" : "process_vm_readv", size,
                                write ? "into" : "from", (unsigned)pid, done, strerror(err));
        }
        return OPAL_ERR_NOT_AVAILABLE;
    }
    return OPAL_SUCCESS;
}

int mca_btl_shardx_cma_copy(mca_btl_shardx_module_t *m, mca_btl_base_endpoint_t *ep, void *local,
                            uint64_t raddr, size_t size,
                            const mca_btl_base_registration_handle_t *remote_handle, bool write)
{
    uint32_t pid = mca_btl_shardx_cma_owner(ep, remote_handle, raddr, size, write);

    if (pid == 0)
        return OPAL_ERR_NOT_AVAILABLE;
    if (mca_btl_shardx_cma_move(pid, local, raddr, size, write) != OPAL_SUCCESS) {
        SHARDX_COUNT(m, n_cma_fallback);
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if (write)
        SHARDX_COUNT(m, n_cma_put);
    else
        SHARDX_COUNT(m, n_cma_get);
    return OPAL_SUCCESS;
}
