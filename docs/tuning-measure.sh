#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The measurements behind docs/tuning.md: run from anywhere after make build;
# each block is one sx_bench run between two sx_run ranks.
cd "$(dirname "$0")/../build"
R="./sx_run -n 2 --no-prefix --timeout 300"
B=./bench/sx_bench
echo "### uptime"; uptime
for ae in 1 16 64; do
  echo "### ACK_EVERY=$ae rate"; SX_ACK_EVERY=$ae $R $B rate --iters 200000 --window 64 2>&1 | grep -E "^ +8 "
done
for ad in 0 50 500; do
  echo "### ACK_DELAY_US=$ad latency 8B"; SX_ACK_DELAY_US=$ad $R $B latency --size 8 --iters 20000 2>&1 | grep -E "^ +8 "
done
for ck in yes no; do
  echo "### CHECKSUM=$ck bw 1MiB"; SX_CHECKSUM=$ck $R $B bw --size 1048576 --iters 2000 2>&1 | grep -E "^ +1048576 "
done
for w in 16 64 256 1024; do
  echo "### window $w rate agg"; $R $B rate --iters 200000 --window $w 2>&1 | grep -E "^ +8 "
done
for pr in poll thread; do
  echo "### PROGRESS=$pr latency 8B"; SX_PROGRESS=$pr $R $B latency --size 8 --iters 20000 2>&1 | grep -E "^ +8 "
done
for rto in 500 2000 20000; do
  echo "### RTO_MIN_US=$rto loss"; SX_RTO_MIN_US=$rto $R $B loss --size 1024 --iters 20000 2>&1 | grep -E "^ +[0-9]"
done
echo "### uptime"; uptime
