#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A remote-shell agent for the namespace cluster (cluster.sh): what ssh is
# to a real cluster, for Open MPI (`--mca plm_rsh_agent agent.sh`) and for
# sx_run (`--agent`).
#
#   agent.sh [USER@]HOST WORD...
#
# runs the command on HOST as ssh does: the words are joined with spaces
# and run by a shell there, so they are shell syntax. Open MPI relies on
# that: plm_rsh passes orted's arguments in double quotes, as separate
# words (` orted`, `-mca`, `ess`, `"env"`, ...), and with --prefix a
# `PATH=...; export PATH; ...` in front. Quote an argument that must
# stay one word; to run an argument vector as it is, use
# `cluster.sh exec CLUSTER HOST CMD...` instead.
#
# The cluster is $CLUSTER_NAME (with_cluster.sh sets it) or else the host's
# name without its number: cluster names never end with a digit.
#
# stdin, stdout and stderr pass through, and so does the exit status.
# Nothing is left between the caller and the command: this script execs
# cluster.sh, which execs into the host's namespaces, and bash, which runs
# the words, execs the last command itself (for orted, the only one), so
# the agent's pid ends up being the command's, and when mpirun or sx_run
# kills the agent it kills the command. Where the words are a list that
# ends with something else than a simple command, a shell stays as the
# command's parent, as with ssh; orted then still exits when it loses
# its connection to mpirun, and `cluster.sh down` kills whatever is left.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# < 2)); then
    echo "usage: ${0##*/} [USER@]HOST WORD..." >&2
    exit 2
fi
host=${1#*@}
shift
cluster=${CLUSTER_NAME:-}
if [[ -z $cluster ]]; then
    cluster=${host%"${host##*[!0-9]}"}
fi
shell=$(command -v bash || echo /bin/sh)
exec "$here/cluster.sh" exec "$cluster" "$host" "$shell" -c "$*"
