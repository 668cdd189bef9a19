# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the cluster scripts (cluster.sh, harness.sh, attack_job.sh),
# not run: the one bounded poll they share.

# poll TRIES CMD...: runs CMD until it succeeds, at most TRIES times 50 ms
# apart; fails when it never did. The kernel and the processes go at their
# own pace (links come up through linkwatch, ranks write files when they
# are ready), and nothing tells a script when: a poll for the condition,
# never a wait for a time.
poll() {
    local tries=$1
    shift
    while ! "$@"; do
        ((--tries > 0)) || return 1
        sleep 0.05
    done
}
