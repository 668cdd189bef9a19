#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Network probes for the cluster tests (tests/cluster), where iputils may
be missing: run inside a host with `cluster.sh exec`.

  nettool.py ping HOST [--size N] [--df] [--count C] [--timeout S]
      ICMP echo over a raw socket (needs root, as `up` does). --df sets
      IP_PMTUDISC_DO: the datagram is never fragmented, so a payload of
      MTU - 28 bytes passes only if every link carries the MTU, and one
      byte more is refused by the sender's kernel (EMSGSIZE, exit 3).
      Exit 0 on the first reply, 1 if none came in C tries of S seconds.
  nettool.py sink PORT BYTES
      Listens on TCP PORT, prints "ready" once it does (the caller waits
      for that line, not for a time), takes one connection, reads BYTES and
      prints "received BYTES in SECONDS after FIRST": SECONDS from the
      return of the first recv, which got FIRST bytes, to the last byte.
      BYTES 0: whatever comes until the sender closes (at least a byte).
      --progress: also a line "progress TIME BYTES" (TIME: seconds since
      the epoch) every 0.2 s while data comes, so that a caller can take
      the rate over a window of its own (bench/bench_incast.sh).
  nettool.py send HOST PORT BYTES [--seconds S]
      Connects to HOST:PORT and sends BYTES; with --seconds, stops after S
      seconds if that comes first (BYTES 0: no limit but the time), a flow
      of a given length, as bench/bench_incast.sh's beside shardx's.
"""
import argparse
import os
import select
import socket
import struct
import sys
import time

ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0
# <linux/in.h>; Python names them only on some builds.
IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)


def checksum(data):
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(args):
    addr = socket.gethostbyname(args.host)
    ident = os.getpid() & 0xFFFF
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    if args.df:
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    payload = bytes(i & 0xFF for i in range(args.size))
    for seq in range(1, args.count + 1):
        header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
        packet = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0,
                             checksum(header + payload), ident, seq) + payload
        start = time.monotonic()
        try:
            sock.sendto(packet, (addr, 0))
        except OSError as e:
            print("ping %s: %d bytes: %s" % (args.host, args.size, e.strerror))
            return 3
        deadline = start + args.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                break
            data, (src, _) = sock.recvfrom(65535)
            ihl = (data[0] & 0x0F) * 4
            kind, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if (kind == ICMP_ECHO_REPLY and rid == ident and rseq == seq
                    and src == addr):
                if data[ihl + 8:] != payload:
                    print("ping %s: reply %d with other data" % (args.host, seq))
                    return 1
                print("ping %s (%s): %d bytes: reply %d in %.2f ms" %
                      (args.host, addr, args.size, seq,
                       (time.monotonic() - start) * 1000))
                return 0
    print("ping %s (%s): %d bytes: no reply in %d tries" %
          (args.host, addr, args.size, args.count))
    return 1


def sink(args):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", args.port))
    srv.listen(1)
    print("ready", flush=True)
    conn, _ = srv.accept()
    got, first, first_len = 0, None, 0
    next_report = 0.0
    while args.bytes == 0 or got < args.bytes:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        if first is None:
            first, first_len = time.monotonic(), len(chunk)
        got += len(chunk)
        if args.progress and time.monotonic() >= next_report:
            print("progress %.3f %d" % (time.time(), got), flush=True)
            next_report = time.monotonic() + 0.2
    took = time.monotonic() - first if first is not None else 0.0
    print("received %d in %.3f after %d" % (got, took, first_len), flush=True)
    if args.bytes == 0:
        return 0 if got > 0 else 1
    return 0 if got == args.bytes else 1


def send(args):
    if args.bytes == 0 and args.seconds is None:
        print("send: BYTES 0 needs --seconds", file=sys.stderr)
        return 2
    end = time.monotonic() + args.seconds if args.seconds is not None else None
    with socket.create_connection((args.host, args.port), timeout=60) as s:
        block = b"x" * (1 << 16)
        left = args.bytes if args.bytes > 0 else float("inf")
        while left > 0 and (end is None or time.monotonic() < end):
            n = int(min(left, len(block)))
            s.sendall(block[:n])
            left -= n
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("ping")
    q.add_argument("host")
    q.add_argument("--size", type=int, default=56)
    q.add_argument("--df", action="store_true")
    q.add_argument("--count", type=int, default=3)
    q.add_argument("--timeout", type=float, default=2.0)
    q = sub.add_parser("sink")
    q.add_argument("port", type=int)
    q.add_argument("bytes", type=int)
    q.add_argument("--progress", action="store_true")
    q = sub.add_parser("send")
    q.add_argument("host")
    q.add_argument("port", type=int)
    q.add_argument("bytes", type=int)
    q.add_argument("--seconds", type=float)
    args = p.parse_args()
    return {"ping": ping, "sink": sink, "send": send}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
