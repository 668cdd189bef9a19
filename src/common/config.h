/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The configuration table: every tunable of shardx in one place.
 *
 * SX_CONFIG_TABLE is the single source of the parameter list. Each row is
 *   X(NAME, TYPE, field, "default", min, max, "word|list", "description")
 * where NAME is read from the environment as SX_NAME, TYPE is the suffix of
 * an sx_param_type_t, and field is the member of sx_config_t that holds the
 * parsed value (uint64_t for UINT and SIZE, double for DOUBLE, bool for
 * BOOL, int — the word's index — for ENUM, char * for STRING). min and max
 * bound numeric types; the word list is used by ENUM only.
 *
 * Precedence: engine parameters, then the environment, then the default.
 */
#ifndef SX_COMMON_CONFIG_H
#define SX_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shardx.h>

/*
 * SX_UDP_ACK_SOCKET's default: off, because on loopback the ACK socket
 * (src/transports/udp.c, "ACK socket") cost throughput and latency and had
 * no lost ACK to save; a real NIC may decide otherwise. docs/tuning.md,
 * section "ACK socket: SX_UDP_ACK_SOCKET", has the measurements.
 */
#define SX_UDP_ACK_SOCKET_DEFAULT "no"

#define SX_CONFIG_TABLE(X)                                                                     \
    X(SHARDS, UINT, shards, "0", 0, 1024, NULL,                                                \
      "Number of shards; 0 means one per core of the process's cpuset. More shards than "      \
      "cores is allowed (and warned about).")                                                  \
    X(THREAD_MODE, ENUM, thread_mode, "sharded", 0, 0, "sharded|global",                       \
      "sharded: one shard per core, each with its own token and inbox. global: one shard "     \
      "behind one recursive lock, the usnic-style baseline kept for comparison.")              \
    X(LOG_LEVEL, ENUM, log_level, "warn", 0, 0, "error|warn|info|debug|trace",                 \
      "Lowest severity written to the log.")                                                   \
    X(LOG_FILE, STRING, log_file, "", 0, 0, NULL,                                              \
      "Append log lines to this file instead of standard error.")                              \
    X(HOTEL_ROOMS, UINT, hotel_rooms, "16384", 16, 1048576, NULL,                              \
      "Rooms in each shard's hotel: the most packets a shard keeps waiting for an "            \
      "acknowledgement.")                                                                      \
    X(TIMER_TICK_US, UINT, timer_tick_us, "10", 1, 100000, NULL,                               \
      "Granularity of each shard's timer wheel in microseconds; timers fire up to one "        \
      "tick late, never early.")                                                               \
    X(TRANSPORTS, STRING, transports, "", 0, 0, NULL,                                          \
      "Network transports the engine may select: \"ofi\" or \"udp,ofi\" allows only "          \
      "those, \"^ofi\" all but those; empty: all built in. Of those that can run here, "       \
      "the one with the highest exclusivity is used (verbs on an RDMA device or ofi on a "     \
      "NIC's own provider, then udp, "                                                         \
      "then libfabric's socket emulations); self always carries sends to the engine "          \
      "itself. Peers must select the same transport. sink (no network: every packet is "       \
      "acknowledged as posted, for measuring the engine alone; needs SX_CPC=implicit) "        \
      "runs only when named.")                                                                 \
    X(OFI_PROVIDER, STRING, ofi_provider, "", 0, 0, NULL,                                      \
      "libfabric provider for the ofi transport (fi_info -t FI_EP_DGRAM lists them); "         \
      "empty: the first datagram provider libfabric prefers. Without a fabric device, "        \
      "ofi is only considered when this is set or SX_TRANSPORTS is.")                          \
    X(BIND_ADDR, STRING, bind_addr, "", 0, 0, NULL,                                            \
      "Where the udp transport listens. Empty: every interface that is up, offering each "     \
      "non-loopback IPv4 and global IPv6 address to peers on other hosts and loopback to "     \
      "those on this one. Interface names and IPv4 or IPv6 subnets separated by commas "       \
      "(\"eth0,10.1.0.0/16,fd00::/8\"), all preceded by ^ to exclude them (\"^docker0\"): "    \
      "those addresses only. One IPv4 address, with an "                                       \
      "optional :port: that address alone (127.0.0.1 keeps a job on this host). ofi over a "   \
      "sockets provider binds this address, else its first interface's that is not "           \
      "loopback; the OOB this address, else the one towards sx_run's rendezvous, else the "    \
      "first interface's.")                                                                    \
    X(NET_DEVICES, STRING, net_devices, "", 0, 0, NULL,                                        \
      "Devices the network transport may use, as a comma-separated list of names: verbs "      \
      "devices (\"mlx5_0,mlx5_1\") or network interfaces (\"eth0,eth1\"); for udp also IPv4 "  \
      "subnets (\"10.1.0.0/16\": the interfaces with an address there); all after ^ to use "   \
      "every device but those; empty: any. Each shard takes the listed device nearest its "    \
      "NUMA node, spreading over equally near ones (sx_info shows the choice). udp, which "    \
      "otherwise listens on every interface (SX_BIND_ADDR), then binds each shard to the "     \
      "IPv4 address of its interface; a name that is not an interface here is an error. ofi "  \
      "takes the names as libfabric domains (interfaces for its udp provider) and opens each " \
      "shard on its own; a name that is no domain here is an error.")                          \
    X(FAULT, STRING, fault, "", 0, 0, NULL,                                                    \
      "Inject faults on the network transport, e.g. "                                          \
      "\"loss=0.05,dup=0.01,reorder=0.05,corrupt=0.001,delay_us=200,seed=7\"; empty: off.")    \
    X(WINDOW, UINT, window, "4096", 16, 65536, NULL,                                           \
      "Send window per channel, in packets (rounded up to a power of two).")                   \
    X(MAX_INFLIGHT, SIZE, max_inflight, "4m", 65536, 1073741824, NULL,                         \
      "Most unacknowledged bytes per channel. An engine whose receive sockets hold less "      \
      "(SX_RCVBUF capped by net.core.rmem_max) uses half of what they hold instead, and "      \
      "warns.")                                                                                \
    X(RCVBUF, SIZE, rcvbuf, "16m", 0, 1073741824, NULL,                                        \
      "Receive socket buffer to request (SO_RCVBUFFORCE, then SO_RCVBUF); 0: the "             \
      "system default.")                                                                       \
    X(SNDBUF, SIZE, sndbuf, "4m", 0, 1073741824, NULL,                                         \
      "Send socket buffer to request; 0: the system default.")                                 \
    X(UDP_ACK_SOCKET, BOOL, udp_ack_socket, SX_UDP_ACK_SOCKET_DEFAULT, 0, 0, NULL,             \
      "Give each shard's udp interface a second socket for pure ACKs, read before the data "   \
      "socket, so ACKs do not queue behind data. Peers with and without it interoperate.")     \
    X(UDP_CONNECT, UINT, udp_connect, "16", 0, 4096, NULL,                                     \
      "Peers per udp interface that get their own connected send socket, which spares the "    \
      "kernel a route lookup per datagram (the rest share the data socket); 0: none. Each "    \
      "costs a file descriptor per shard.")                                                    \
    X(UDP_GSO, BOOL, udp_gso, "yes", 0, 0, NULL,                                               \
      "Send a run of equal datagrams to one peer as one message the kernel cuts up (UDP GSO) " \
      "and read datagrams the kernel coalesced (UDP GRO), where it has them (Linux 5.0): "     \
      "bulk data on a 1500-byte path then costs a system call per 44 datagrams or fewer. "     \
      "no: one sendmmsg entry per datagram.")                                                  \
    X(UDP_HOT, BOOL, udp_hot, "yes", 0, 0, NULL,                                               \
      "Give each shard's udp interface a second socket on its data port, connected to the "    \
      "destination the last run of 32 small datagrams went to: they leave through it, and "    \
      "that peer's datagrams to the data port land in it, where a ping-pong's are read "       \
      "without the sender's address. A socket without a datagram in 1,024 reads is read "      \
      "every 16th poll while the other is busy, less often the longer it stays quiet (every "  \
      "128th at most). Costs a file descriptor per shard.")                                    \
    X(CONGESTION, ENUM, cc, "auto", 0, 0, "auto|on|off",                                       \
      "Congestion control: one window in bytes per destination host, shared by the engine's "  \
      "channels to it, paced, halved on loss, its slow start ended when round trips show a "   \
      "queue (SX_CONGESTION_DELAY_US). auto: for datagrams that leave this host; on: also "    \
      "over loopback (tests); off: only the send window, byte budget and the peer's receive "  \
      "window bound a channel.")                                                               \
    X(CONGESTION_DELAY_US, UINT, cc_delay_us, "500", 0, 1000000, NULL,                         \
      "Queueing delay that ends the congestion window's slow start (HyStart++, RFC 9406): "    \
      "the smallest of a round trip's samples (8 at least) this much above the round "         \
      "before's (or an eighth of it if more, up to 16 ms); the window then grows by a "        \
      "datagram per round trip until a loss. 0: losses alone.")                                \
    X(CONGESTION_ECN, BOOL, cc_ecn, "yes", 0, 0, NULL,                                         \
      "ECN (RFC 3168) with congestion control on: udp data datagrams leave marked ECT(0), "    \
      "receivers count the CE marks routers set and echo the counts in every ACK, and a "      \
      "count that grew cuts the window once per round trip, by half at first and then by "     \
      "half the share of datagrams marked (DCTCP), with nothing lost. no: not ECN-capable "    \
      "(routers drop instead of marking).")                                                    \
    X(ACK_DELAY_US, UINT, ack_delay_us, "50", 0, 1000000, NULL,                                \
      "Delayed acknowledgement: longest wait before an ACK is sent on its own.")               \
    X(ACK_EVERY, UINT, ack_every, "16", 1, 4096, NULL,                                         \
      "Send an ACK at once after this many message frames arrived unacknowledged (a "          \
      "packet of aggregated small messages counts each).")                                     \
    X(RTO_MIN_US, UINT, rto_min_us, "2000", 10, 60000000, NULL,                                \
      "Floor of the retransmission timeout (RFC 6298); high enough that a peer "               \
      "descheduled for a scheduler slice causes a spurious retransmit, not a failure.")        \
    X(RTO_MAX_US, UINT, rto_max_us, "1000000", 100, 600000000, NULL,                           \
      "Ceiling of the retransmission timeout after exponential back-off.")                     \
    X(RTO_INIT_US, UINT, rto_init_us, "10000", 10, 60000000, NULL,                             \
      "Retransmission timeout before the first round-trip sample.")                            \
    X(TLP, BOOL, tlp, "yes", 0, 0, NULL,                                                       \
      "Tail loss probes (RACK-TLP, RFC 8985 section 7): with packets in flight and neither "   \
      "an ACK nor a new packet for two smoothed round trips plus the larger of "               \
      "SX_ACK_DELAY_US and four RTT deviations, send the newest packet not known to have "     \
      "arrived again, so that a loss at the end of a burst is repaired by its ACK (and "       \
      "RACK) in a few round trips instead of a retransmission timeout. no: such losses wait "  \
      "for the timeout.")                                                                      \
    X(PEER_TIMEOUT_MS, UINT, peer_timeout_ms, "30000", 10, 86400000, NULL,                     \
      "A peer that answers none of the retransmissions and probes sent to it for this long "   \
      "fails: its operations complete with SX_ERR_PEER_UNREACHABLE and the error callback "    \
      "runs. Time this process did not run does not count, and a busy peer still answers "     \
      "(SX_SERVICE_US).")                                                                      \
    X(CHECKSUM, BOOL, checksum, "yes", 0, 0, NULL,                                             \
      "CRC32C over every payload that leaves this host (the header checksum is always on); "   \
      "datagrams to a peer on this host (loopback, or the same process) never leave memory "   \
      "and carry none.")                                                                       \
    X(CHECK_SOURCE, BOOL, check_source, "yes", 0, 0, NULL,                                     \
      "Take a peer's datagrams only from an IP address its card offers (udp), and drop the "   \
      "rest as drop_source; no: for networks that rewrite source addresses (NAT) or peers "    \
      "that send from an address their SX_BIND_ADDR leaves out of the card.")                  \
    X(AGGREGATE, BOOL, aggregate, "yes", 0, 0, NULL,                                           \
      "Pack several small messages queued for one peer into one datagram; no: one "            \
      "message frame per datagram (for measuring what aggregation buys).")                     \
    X(MAX_MSG_SIZE, SIZE, max_msg_size, "64m", 0, 4294967295, NULL,                            \
      "Largest active message accepted, sent or received; bounds reassembly memory.")          \
    X(PROGRESS, ENUM, progress, "poll", 0, 0, "poll|thread",                                   \
      "poll: callers progress the engine with sx_progress. thread: one progress thread "       \
      "per shard, spinning SX_SPIN_US and then sleeping in epoll.")                            \
    X(YIELD, ENUM, yield, "auto", 0, 0, "auto|always|never",                                   \
      "What an sx_progress caller does after 16 empty calls in a row: give its core up on "    \
      "each further empty call (wait up to 500 us on its home shard's sockets; sched_yield "   \
      "when another thread holds that shard). auto: only while the process or machine is "     \
      "oversubscribed (OMPI_MCA_mpi_yield_when_idle set by mpirun, more calling threads than " \
      "the cpuset's CPUs, or more runnable tasks than online CPUs while tasks waited for a "   \
      "CPU a tenth of the time, by /proc/pressure/cpu); always; never: spin.")                 \
    X(REPOLL, UINT, repoll, "2", 0, 16, NULL,                                                  \
      "Reads an sx_progress call makes again when its first found nothing and its caller "     \
      "spins (the last call found work, or the caller came back within three empty reads' "    \
      "time of its end): up to this many, with only a clock read between two, before the "     \
      "rest of the pass. None while the caller would give its core up (SX_YIELD), nor for a "  \
      "caller that computes between calls. 0: one read a call.")                               \
    X(SPIN_US, UINT, spin_us, "50", 0, 1000000, NULL,                                          \
      "How long an idle progress thread polls before it sleeps; a sleep and wake-up "          \
      "costs tens of microseconds on a VM.")                                                   \
    X(SERVICE_US, UINT, service_us, "10000", 0, 10000000, NULL,                                \
      "How long an engine may go without an sx_progress call before its service thread "       \
      "serves the shards itself: it acknowledges, retransmits, answers connection "            \
      "requests and probes, and keeps what arrives for the next caller; it never runs a "      \
      "callback. 0 turns it off (a busy rank then stops answering). Not used with "            \
      "SX_PROGRESS=thread.")                                                                   \
    X(SENDI_HOLD_US, UINT, sendi_hold_us, "0", 0, 10000, NULL,                                 \
      "How long sx_sendi may hold a message back so that the next ones share its datagram: "   \
      "the second and later sx_sendi of a caller between two of its sx_progress calls wait "   \
      "for the next call, for 64 KiB of them, or for this many microseconds, when the "        \
      "engine's service thread sends them. 0: every one at once. Needs the service "           \
      "(SX_SERVICE_US > 0, SX_PROGRESS=poll); the Open MPI BTL sets 50.")                      \
    X(BIND_PROGRESS, BOOL, bind_progress, "no", 0, 0, NULL,                                    \
      "Pin each progress thread to its shard's core. Off by default: hybrid MPI+OpenMP "       \
      "programs pin their own threads.")                                                       \
    X(STATS, ENUM, stats, "none", 0, 0, "none|text|json",                                      \
      "Print the engine's counters to standard error when it is destroyed.")                   \
    X(SEQ_START, UINT, seq_start, "0", 0, 4294967295, NULL,                                    \
      "First sequence number of every channel, for testing wrap-around. Unset, a channel "     \
      "that connects with an exchange (handshake, oob, rdmacm) starts at a random number "     \
      "(getrandom; RFC 6528), so a forger off the path must guess it, and one that connects "  \
      "implicitly at 0. Set, every channel starts here; with the implicit method every "       \
      "process of a job must use the same value.")                                             \
    X(AUTH, STRING, auth, "", 0, 0, NULL,                                                      \
      "Authenticate every datagram with a keyed MAC (SipHash-2-4, a 16-byte tag; needs "       \
      "libsodium), so that a forger who sees the traffic still cannot inject, alter or "       \
      "replay one: 32 hex digits, the key itself (every process of the job gives the same "    \
      "one; the runtime distributes it in manual mode); job: a key drawn by rank 0 and "       \
      "handed to the others with the cards by sx_engine_join (sx_run, mpirun). Empty: off. "   \
      "Peers must agree: sx_peer_add fails with SX_ERR_AUTH for a peer with another key or "   \
      "none, and datagrams without a valid tag are dropped (drop_auth).")                      \
    X(CPC, STRING, cpc, "", 0, 0, NULL,                                                        \
      "Connection methods to offer: \"handshake,implicit\" keeps only those, \"^oob\" "        \
      "drops one; empty: all that can run (handshake, implicit, oob when the engine has an "   \
      "OOB endpoint, rdmacm when it runs verbs and librdmacm works). A peer uses the "         \
      "highest-priority method both sides offer.")                                             \
    X(RDMACM_PORT, UINT, rdmacm_port, "0", 0, 65535, NULL,                                     \
      "Port of the rdmacm connection method's listener (RDMA_PS_UDP) on the RDMA device's "    \
      "IPv4 address (SX_BIND_ADDR, or the RoCE GID's); 0: one the kernel chooses, which the "  \
      "business card carries.")                                                                \
    X(CONNECT_TIMEOUT_MS, UINT, connect_timeout_ms, "10000", 10, 3600000, NULL,                \
      "How long a channel may take to connect before it fails with a diagnosis "               \
      "(SX_ERR_PEER_UNREACHABLE, or SX_ERR_PATH_MTU when only small datagrams get "            \
      "through).")                                                                             \
    X(MODEX, ENUM, modex, "auto", 0, 0, "auto|pmix|sxrun|manual",                              \
      "How sx_engine_join exchanges business cards: pmix under a PMIx launcher (mpirun), "     \
      "sxrun under sx_run, manual (the caller runs sx_engine_address/sx_peer_add); auto "      \
      "picks the launcher that started the process.")                                          \
    X(DUMP_SIGNAL, UINT, dump_signal, "0", 0, 64, NULL,                                        \
      "Signal number (e.g. 10, SIGUSR1 on Linux) on which every engine of the process "        \
      "writes its state (sx_dump: shards, channels, pending operations) to the log; 0: "       \
      "off.")                                                                                  \
    X(WATCHDOG_S, UINT, watchdog_s, "0", 0, 86400, NULL,                                       \
      "Progress watchdog: report operations pending longer than this many seconds, with "      \
      "their age, peer and kind, and the state of their channels; 0: off.")                    \
    X(WATCHDOG_ABORT, BOOL, watchdog_abort, "no", 0, 0, NULL,                                  \
      "Abort the process after the watchdog's first report (MPICH's progress timeout), "       \
      "for a core file or a job that must not hang.")

/* Word indices of the ENUM parameters; they follow the word lists above. */
enum { SX_THREAD_MODE_SHARDED = 0, SX_THREAD_MODE_GLOBAL = 1 };
enum { SX_STATS_NONE = 0, SX_STATS_TEXT = 1, SX_STATS_JSON = 2 };
enum { SX_PROGRESS_POLL = 0, SX_PROGRESS_THREAD = 1 };
enum { SX_MODEX_AUTO = 0, SX_MODEX_PMIX = 1, SX_MODEX_SXRUN = 2, SX_MODEX_MANUAL = 3 };

typedef struct sx_config {
    uint64_t shards;
    int thread_mode;
    int log_level;
    char *log_file;
    uint64_t hotel_rooms;
    uint64_t timer_tick_us;
    char *transports;
    char *ofi_provider;
    char *bind_addr;
    char *net_devices;
    char *fault;
    uint64_t window;
    uint64_t max_inflight;
    uint64_t rcvbuf;
    uint64_t sndbuf;
    bool udp_ack_socket;
    uint64_t udp_connect;
    bool udp_gso;
    bool udp_hot;
    bool cc_ecn;
    int cc;
    uint64_t cc_delay_us;
    uint64_t ack_delay_us;
    uint64_t ack_every;
    uint64_t rto_min_us;
    uint64_t rto_max_us;
    uint64_t rto_init_us;
    bool tlp;
    uint64_t peer_timeout_ms;
    bool checksum;
    bool check_source;
    bool aggregate;
    uint64_t max_msg_size;
    int progress;
    int yield;
    uint64_t repoll;
    uint64_t spin_us;
    uint64_t sendi_hold_us;
    uint64_t service_us;
    bool bind_progress;
    int stats;
    uint64_t seq_start;
    char *auth;
    char *cpc;
    uint64_t rdmacm_port;
    uint64_t connect_timeout_ms;
    int modex;
    uint64_t dump_signal;
    uint64_t watchdog_s;
    bool watchdog_abort;
    /* Bit i: parameter i (sx_param_info's index) was given, in the
     * engine parameters or the environment, rather than defaulted. */
    uint64_t given;
} sx_config_t;

/**
 * Fills @p cfg from @p kv (may be NULL), the environment and the defaults.
 * On an invalid value or an unknown name in @p kv, logs an error naming the
 * variable, the value and what is allowed, and returns SX_ERR_INVALID_PARAM
 * with @p cfg released. Thread-safe (reads the environment only).
 */
int sx_config_load(sx_config_t *cfg, const sx_config_kv_t *kv, size_t kv_count);

/** Frees what sx_config_load allocated; safe on a zeroed config. */
void sx_config_release(sx_config_t *cfg);

/**
 * Warns once per process about each SX_* environment variable that is not a
 * parameter, naming the closest known one. Returns how many it found.
 */
size_t sx_config_check_environment(void);

/**
 * The parameter name closest to @p name by edit distance (prefix "SX_"
 * ignored), or NULL if nothing is close enough to be a plausible typo.
 */
const char *sx_config_closest(const char *name);

/**
 * Parses @p text as a value of @p type into @p field: a uint64_t for UINT
 * and SIZE, double, bool, int (the word's index in the '|'-separated
 * @p words) for ENUM, or char * for STRING (the old string is freed).
 * Numbers must lie in [min, max]. Returns 0, or -1 with @p field
 * untouched. The table parser is built on it; tests call it directly for
 * types the table does not use yet.
 */
int sx_config_parse_typed(sx_param_type_t type, const char *words, double min, double max,
                          const char *text, void *field);

/** Parses @p text as parameter @p index would; for tests. */
int sx_config_parse_one(size_t index, const char *text, sx_config_t *cfg);

/** Index of the parameter called @p name (with or without "SX_"), or -1. */
int sx_config_find(const char *name);

#endif /* SX_COMMON_CONFIG_H */
