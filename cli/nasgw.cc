// nasgw: the admin CLI. Every subcommand is one call of the admin API
// (proto/admin.proto) to nasgwd, over its Unix socket or over TCP with TLS.
// It holds no logic of its own beyond parsing, printing and exit codes.
//
// Exit codes (also in --help):
//   0  ok
//   1  the operation failed on the server (message on stderr: "nasgw: <message>")
//   2  usage error (bad command, option or value)
//   3  nasgwd unreachable (socket/server named; TLS handshake failures too)
//   4  not found
//   5  already exists
//   6  refused (a precondition: e.g. deleting a non-empty volume needs --force)
// Errors are one line on stderr; with --json, stdout also gets one object
// {"error": {"code": ..., "message": ...}}.

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/text.h"
#include "proto/admin.grpc.pb.h"

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/un.h>

namespace {

namespace pb = ::nasgw::admin::v1;
using nlohmann::json;

enum Exit : int {
  kExitOk = 0,
  kExitFailed = 1,
  kExitUsage = 2,
  kExitUnreachable = 3,
  kExitNotFound = 4,
  kExitExists = 5,
  kExitRefused = 6,
};

constexpr const char* kDefaultSocket = "/run/nasgw/admin.sock";

const char* kMainHelp = R"(usage: nasgw [global options] <command> [options]

Manage a nasgw node through nasgwd's admin API.

commands:
  node status | node show            the node: name, version, uptime, reserve state and owner
  reserve status                     the reserve: state, capacity, free space
  reserve luns                       the reserve's LUNs: size, groups, health, paths, I/O
  reserve format --name NAME [--ag-size SIZE] [--domains N] [--force]
                                     label the node's LUNs as a new reserve
  reserve add-lun URL [--force]      add a LUN to the online reserve (grows it)
  reserve takeover [--force]         take the reserve from the node that owns it
  cluster status                     the controller pair: interconnect, peers, the verdict on the
                                     reserve's owner, degraded or not, automatic takeovers
  cluster giveback                   planned move, on the owner: hand the reserve to the partner
  cluster takeover [--timeout-ms N]  planned move, on the standby: ask the owner for the reserve
  volume list                        the NAS volumes
  volume show NAME                   one volume
  volume create NAME [--record-size SIZE] [--domain D]
  volume set NAME [--record-size SIZE] [--write-through on|off] [--atime POLICY]
  volume delete NAME [--force]       --force deletes a volume that holds files
  snapshot list VOLUME               the volume's snapshots, oldest first
  snapshot show VOLUME NAME          one snapshot
  snapshot create VOLUME NAME        snapshot the volume as it stands now
  snapshot delete VOLUME NAME        delete a snapshot (gives back what only it holds)
  snapshot rollback VOLUME NAME      undo every change made since NAME, the newest snapshot
  snapshot clone VOLUME SNAPSHOT NEWVOLUME
                                     a new, writable volume made from a snapshot, sharing its data
  snapshot schedule add VOLUME --every DURATION --keep N [--name NAME]
                                     snapshot the volume every DURATION, keeping its newest N
  snapshot schedule list [VOLUME]    the snapshot schedules: every volume's, or one's
  snapshot schedule remove VOLUME NAME
                                     stop a schedule (its snapshots are kept)
  export list                        the NFS exports
  export show ID|PSEUDO              one export, by id or pseudo path
  export add VOLUME[/SUBPATH] [--pseudo P] [--clients CIDR[,CIDR...]] [--ro]
             [--no-root-squash] [--sec sys[,krb5...]] [--protocols 3,4]
                                     export a volume (or a directory in it) over NFS
  export remove ID                   stop exporting
  share list                         the SMB shares
  share show NAME                    one share
  share add VOLUME[/SUBPATH] --name NAME [--read-only] [--valid-users U[,@G...]]
            [--browseable | --hidden] [--encrypt] [--guest-ok] [--comment TEXT]
                                     share a volume (or a directory in it) over SMB
  share remove NAME                  stop sharing
  stats                              per-LUN I/O (operations, bytes, latency p50/p99) and the cache

global options:
  --socket PATH      nasgwd's admin socket (default $NASGW_ADMIN_SOCKET or /run/nasgw/admin.sock)
  --server HOST:PORT reach nasgwd over TCP with TLS instead
  --tls-ca FILE      CA bundle that signed the server's certificate
  --tls-cert FILE    client certificate (when nasgwd requires one), with --tls-key FILE
  --json             print one JSON object on stdout instead of tables
  --timeout SECONDS  give up after this long (default 30)
  -h, --help         help; also after any command: nasgw volume create --help

SIZE takes a suffix: 4K, 128K, 1M, 1G (powers of 1024).
DURATION is a whole number and a unit: 30s, 15m, 1h, 1d, 1w (--every also
takes hourly, daily, weekly).

exit codes:
  0 ok                      4 not found
  1 failed on the server    5 already exists
  2 usage error             6 refused (e.g. needs --force)
  3 nasgwd unreachable
)";

struct CommandSpec {
  std::string group, verb;          // a verb may be two words: "schedule add"
  size_t positionals;               // required positional arguments
  std::vector<std::string> flags;   // boolean options
  std::vector<std::string> valued;  // options taking a value
  std::string usage;
  size_t optional = 0;  // optional positional arguments after the required ones
};

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec> specs = {
      {"node",
       "status",
       0,
       {},
       {},
       "usage: nasgw node status\n\nThe node: name, version, uptime, reserve state and owner, head activity.\n"},
      {"node",
       "show",
       0,
       {},
       {},
       "usage: nasgw node show\n\nThe node: name, version, uptime, reserve state and owner, head activity.\n"},
      {"reserve",
       "status",
       0,
       {},
       {},
       "usage: nasgw reserve status\n\nThe reserve's state (and why it is not online), name, uuid, capacity and free "
       "space.\n"},
      {"reserve",
       "luns",
       0,
       {},
       {},
       "usage: nasgw reserve luns\n\nThe reserve's LUNs: URL (never the CHAP secret), serial, size, allocation groups, "
       "health, paths, I/O.\n"},
      {"reserve",
       "format",
       0,
       {"--force"},
       {"--name", "--ag-size", "--domains"},
       "usage: nasgw reserve format --name NAME [--ag-size SIZE] [--domains N] [--force]\n\n"
       "Labels the node's LUNs as a new reserve named NAME and creates its domain(s).\n"
       "  --name NAME     1-63 characters: letters, digits, '.', '_', '-'\n"
       "  --ag-size SIZE  allocation group size, a power of two from 1M to 64G (default 1G)\n"
       "  --domains N     split it into N domains, 1 to 28 (default 1), each with its share of every LUN;\n"
       "                  fixed for the reserve's life (docs/cluster.md, \"Several domains per reserve\")\n"
       "  --force         format over an existing reserve or labelled LUNs: destroys every volume on them\n"},
      {"reserve",
       "takeover",
       0,
       {"--force"},
       {},
       "usage: nasgw reserve takeover [--force]\n\n"
       "Takes the reserve from the node that owns it (this node shows it as standby or fenced)\n"
       "and opens it here, replaying what that node left. Without --force only once the holder\n"
       "has released it or its lease has run out (it has not renewed for a whole lease).\n"
       "  --force  take it from a holder whose lease still runs: its reservation key is preempted\n"
       "           on every LUN, so it can write nothing more (use when it is hung or partitioned)\n"},
      {"reserve",
       "add-lun",
       1,
       {"--force"},
       {},
       "usage: nasgw reserve add-lun URL [--force]\n\n"
       "Adds the LUN at URL (iscsi://[user%password@]host[:port]/target-iqn/lun) to the online\n"
       "reserve and grows the file system onto it. nasgwd remembers it across restarts.\n"
       "  --force  overwrite a LUN that carries a nasgw label\n"},
      {"cluster",
       "status",
       0,
       {},
       {},
       "usage: nasgw cluster status\n\n"
       "The controller pair as this node sees it: the interconnect (Corosync CPG group, ring\n"
       "node, quorum, members), who owns the reserve and the verdict on it from its two\n"
       "heartbeats (the interconnect and the owner record on the LUNs), whether the pair runs\n"
       "degraded, what acknowledges a write, the peers heard, and this node's automatic\n"
       "takeovers with the last one's timeline. Without [cluster] enabled it says so (exit 0).\n"},
      {"cluster",
       "giveback",
       0,
       {},
       {},
       "usage: nasgw cluster giveback\n\n"
       "A planned move, on the node that owns the reserve: nasgwd flushes its write-back cache,\n"
       "removes the client addresses (VIPs) and withdraws the exports and shares, flushes and\n"
       "closes the file system, releases the reserve and stands by. The partner, which must be\n"
       "heard standing by, takes the reserve over by itself within about a heartbeat, with\n"
       "nothing to replay. Then prints the cluster as this node sees it (as cluster status).\n"
       "Refused (exit 6) on a single node, on the standby, or when no partner is heard standing\n"
       "by (nobody would take the reserve); exit 1 when head requests still hold the file\n"
       "system after [shutdown] drain_ms (the reserve then stays here).\n"},
      {"cluster",
       "takeover",
       0,
       {},
       {"--timeout-ms"},
       "usage: nasgw cluster takeover [--timeout-ms N]\n\n"
       "A planned move, on the standby: asks the owner over the interconnect to give the reserve\n"
       "back (as cluster giveback there) and waits for it to come online here, then prints the\n"
       "cluster as this node sees it (as cluster status). Refused (exit 6) on a single node, on\n"
       "the owner, or when nobody holds the reserve (nasgw reserve takeover takes it); exit 1\n"
       "when the owner is not heard on the interconnect (it cannot be asked: if it is dead this\n"
       "node takes over by itself, else nasgw reserve takeover --force fences it) or the reserve\n"
       "did not come over in time (the owner may have refused: see its log).\n"
       "  --timeout-ms N  how long to wait for the reserve, 1 to 600000 ms (default 30000); the\n"
       "                  call waits at least that long whatever --timeout says\n"},
      {"volume",
       "list",
       0,
       {},
       {},
       "usage: nasgw volume list\n\nThe NAS volumes: name, id, record size, files, bytes used, snapshots and the "
       "bytes only they hold.\n"},
      {"volume", "show", 1, {}, {}, "usage: nasgw volume show NAME\n\nOne NAS volume.\n"},
      {"volume",
       "create",
       1,
       {},
       {"--record-size", "--domain"},
       "usage: nasgw volume create NAME [--record-size SIZE] [--domain D]\n\n"
       "Creates a NAS volume (served as /NAME).\n"
       "  --record-size SIZE  a power of two from 4K to 1M (default 128K)\n"
       "  --domain D          the domain of a split reserve that holds it, 0 to domains-1\n"
       "                      (default: the one with the most free space)\n"},
      {"volume",
       "set",
       1,
       {},
       {"--record-size", "--write-through", "--atime"},
       "usage: nasgw volume set NAME [--record-size SIZE] [--write-through on|off] [--atime POLICY]\n\n"
       "Changes a volume's settings.\n"
       "  --record-size SIZE      a power of two from 4K to 1M; only while the volume holds no data\n"
       "  --write-through on|off  strict mode: every write is on the SAN in place before it is\n"
       "                          answered (no write-back caching, no intent log); off: the default\n"
       "  --atime POLICY          when reads (NFS, SMB, FUSE) move a file's access time: relatime\n"
       "                          (the default: when it is not after the last change, or a day\n"
       "                          old), strictatime (every read) or noatime (never)\n"},
      {"volume",
       "delete",
       1,
       {"--force"},
       {},
       "usage: nasgw volume delete NAME [--force]\n\n"
       "Deletes a NAS volume.\n"
       "  --force  delete it even though it holds files (they are lost)\n"},
      {"snapshot",
       "list",
       1,
       {},
       {},
       "usage: nasgw snapshot list VOLUME\n\nThe volume's snapshots, oldest first: name, id, when it was taken, its "
       "transaction group,\nand the data bytes deleting it would give back now.\n"},
      {"snapshot",
       "show",
       2,
       {},
       {},
       "usage: nasgw snapshot show VOLUME NAME\n\nOne snapshot of a volume, with what deleting it would give back now "
       "(data and metadata).\n"},
      {"snapshot",
       "create",
       2,
       {},
       {},
       "usage: nasgw snapshot create VOLUME NAME\n\n"
       "Takes a snapshot of VOLUME named NAME: the volume as it stands now, with every write\n"
       "answered to a client before it (nasgwd flushes its write-back cache first). NAME is\n"
       "1-255 bytes without '/' or NUL, not '.' or '..', unique among the volume's snapshots.\n"},
      {"snapshot",
       "delete",
       2,
       {},
       {},
       "usage: nasgw snapshot delete VOLUME NAME\n\n"
       "Deletes a snapshot: it is gone to clients at once, and what only it held is given back.\n"},
      {"snapshot",
       "rollback",
       2,
       {},
       {},
       "usage: nasgw snapshot rollback VOLUME NAME\n\n"
       "Rolls VOLUME back to NAME, its newest snapshot (delete newer ones first): every change\n"
       "made since is undone, in one atomic step; the snapshot stays. Files created since are\n"
       "gone (clients' handles to them go stale) and what was written since is lost. nasgwd\n"
       "flushes its write-back cache first and drops what it caches of the volume after; NFS\n"
       "and SMB clients may still hold data they cached: stop their applications first, and\n"
       "remount to be sure (as for ZFS rollback). No confirmation is asked.\n"},
      {"snapshot",
       "clone",
       3,
       {},
       {},
       "usage: nasgw snapshot clone VOLUME SNAPSHOT NEWVOLUME\n\n"
       "Makes NEWVOLUME, a writable volume whose files are those of VOLUME's snapshot SNAPSHOT.\n"
       "Nothing but metadata is copied: the clone shares the snapshot's data, and only what is\n"
       "written to it afterwards takes space of its own. The clone and VOLUME then change\n"
       "apart. NEWVOLUME is a volume like any other (a volume name's rules; export, share and\n"
       "snapshot it); volume show and volume list give its origin. SNAPSHOT cannot be deleted\n"
       "while the clone exists: delete the clone first (nasgw volume delete NEWVOLUME --force).\n"
       "Its record size is VOLUME's; strict mode and atime start at the defaults.\n"},
      {"snapshot",
       "schedule add",
       1,
       {},
       {"--every", "--keep", "--name"},
       "usage: nasgw snapshot schedule add VOLUME --every DURATION --keep N [--name NAME]\n\n"
       "Has nasgwd snapshot VOLUME every DURATION, keeping the schedule's newest N snapshots\n"
       "(older ones it took are deleted; snapshots taken by hand or by other schedules never\n"
       "are). The first is taken at once. Snapshots are named NAME-YYYYMMDDTHHMMSSZ (UTC), so\n"
       "they sort by time. The schedule is kept with the reserve: it survives restarts and\n"
       "moves with the reserve to another node.\n"
       "  --every DURATION  a whole number and a unit, s, m, h, d or w (30s, 15m, 1h, 1d, 1w),\n"
       "                    from 1s to 366d; or hourly, daily, weekly\n"
       "  --keep N          how many of its snapshots to keep, 1 to 10000\n"
       "  --name NAME       the schedule's name, unique in the volume: letters, digits, '.', '_',\n"
       "                    '-', up to 64 (default: hourly, daily or weekly for those intervals,\n"
       "                    else every-DURATION)\n"},
      {"snapshot",
       "schedule list",
       0,
       {},
       {},
       "usage: nasgw snapshot schedule list [VOLUME]\n\n"
       "The snapshot schedules of every volume, or of VOLUME: the interval, how many snapshots\n"
       "each keeps, when it last took one and when it takes the next (UTC).\n",
       1},
      {"snapshot",
       "schedule remove",
       2,
       {},
       {},
       "usage: nasgw snapshot schedule remove VOLUME NAME\n\n"
       "Removes a snapshot schedule, after a run of it under way has finished: it takes no more\n"
       "snapshots. The snapshots it took are kept (nasgw snapshot delete removes them).\n"},
      {"export",
       "list",
       0,
       {},
       {},
       "usage: nasgw export list\n\nThe NFS exports: id, pseudo path, volume and path, access, clients, root squash,\n"
       "security flavours, NFS versions.\n"},
      {"export",
       "show",
       1,
       {},
       {},
       "usage: nasgw export show ID|PSEUDO\n\nOne NFS export, by its id (a number) or its pseudo path (/...).\n"},
      {"export",
       "add",
       1,
       {"--ro", "--no-root-squash", "--show-snapshot-dir"},
       {"--pseudo", "--clients", "--sec", "--protocols"},
       "usage: nasgw export add VOLUME[/SUBPATH] [--pseudo P] [--clients CIDR[,CIDR...]] [--ro]\n"
       "                        [--no-root-squash] [--sec sys[,krb5...]] [--protocols 3,4]\n"
       "                        [--show-snapshot-dir]\n\n"
       "Exports a volume, or a directory in it (SUBPATH must exist), over NFS. nasgwd assigns\n"
       "the export an id, keeps it with the reserve and has NFS-Ganesha reload its exports.\n"
       "  --pseudo P          NFSv4 pseudo path, unique (default /VOLUME/SUBPATH)\n"
       "  --clients LIST      IPv4/IPv6 addresses or CIDR networks, comma separated\n"
       "                      (default: every client)\n"
       "  --ro                read-only (default read-write)\n"
       "  --no-root-squash    root stays root (default: root is squashed to 65534)\n"
       "  --sec LIST          security flavours among sys, krb5, krb5i, krb5p (default sys)\n"
       "  --protocols LIST    NFS versions among 3 and 4 (default 3,4)\n"
       "  --show-snapshot-dir every directory lists its .snapshot (default: reachable by\n"
       "                      name only, as NetApp's and ZFS's snapdir hidden)\n"},
      {"export",
       "remove",
       1,
       {},
       {},
       "usage: nasgw export remove ID\n\nStops exporting: removes export ID and has NFS-Ganesha reload its "
       "exports.\n"},
      {"share",
       "list",
       0,
       {},
       {},
       "usage: nasgw share list\n\nThe SMB shares: name, volume and path, access, users, browseable, encryption.\n"},
      {"share", "show", 1, {}, {}, "usage: nasgw share show NAME\n\nOne SMB share, by name (in any case).\n"},
      {"share",
       "add",
       1,
       {"--read-only", "--browseable", "--hidden", "--encrypt", "--guest-ok"},
       {"--name", "--valid-users", "--comment"},
       "usage: nasgw share add VOLUME[/SUBPATH] --name NAME [--read-only] [--valid-users U[,@G...]]\n"
       "                       [--browseable | --hidden] [--encrypt] [--guest-ok] [--comment TEXT]\n\n"
       "Shares a volume, or a directory in it (SUBPATH must exist), over SMB. nasgwd keeps the\n"
       "share with the reserve and has smbd serve it (with vfs_nasgw) at once.\n"
       "  --name NAME          the share's name: letters, digits, '.', '_', '-', up to 80,\n"
       "                       unique in any case; a trailing '$' hides it\n"
       "  --read-only          read-only (default read-write)\n"
       "  --valid-users LIST   users and @groups allowed, comma separated (default: every\n"
       "                       user smbd authenticates)\n"
       "  --browseable         listed to clients (the default); --hidden: not listed\n"
       "  --encrypt            require SMB3 encryption\n"
       "  --guest-ok           allow guest access (default off)\n"
       "  --comment TEXT       what clients see next to the name\n"},
      {"share",
       "remove",
       1,
       {},
       {},
       "usage: nasgw share remove NAME\n\nStops sharing: removes share NAME and has smbd stop serving it.\n"},
      {"stats",
       "",
       0,
       {},
       {},
       "usage: nasgw stats\n\nPer-LUN I/O: operations, bytes, latency p50/p99, retries, timeouts; then the cache: "
       "dirty data and its limit, how writes were answered, bytes written to the array per byte clients wrote, "
       "flushes, and the data and metadata caches' hit ratios.\n"},
  };
  return specs;
}

// `sub`: the first word of two-word verbs ("schedule"), or "" for the whole group.
std::string GroupHelp(const std::string& group, const std::string& sub = "") {
  const std::string name = group + (sub.empty() ? "" : " " + sub);
  std::string s = "usage: nasgw " + name + " <command>\n\ncommands:\n";
  for (const auto& c : Commands()) {
    if (c.group == group && (sub.empty() || c.verb.rfind(sub + " ", 0) == 0)) {
      s += "  " + c.usage.substr(7, c.usage.find('\n') - 7) + "\n";
    }
  }
  s += "\nSee nasgw --help for global options and exit codes.\n";
  return s;
}

// ---- errors

struct Failure {
  int exit_code;
  std::string message;
  std::string code;  // for --json
};

bool g_json = false;

// JSON out: valid whatever the strings hold (invalid UTF-8 becomes U+FFFD;
// control characters are escaped by JSON itself).
std::string Dump(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

int Fail(const Failure& f) {
  // A message may quote a name as it was typed or stored: nothing in it may
  // act on the terminal.
  std::cerr << "nasgw: " << nasgw::EscapeControls(f.message) << "\n";
  if (g_json) std::cout << Dump(json{{"error", {{"code", f.code}, {"message", f.message}}}}) << "\n";
  return f.exit_code;
}

int Usage(const std::string& message, const std::string& help_hint) {
  return Fail({kExitUsage, message + " (see " + help_hint + " --help)", "USAGE"});
}

// ---- sizes

std::optional<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t pos = 0;
  uint64_t v = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(text[pos] - '0');
    pos++;
  }
  if (pos == 0) return std::nullopt;
  std::string suffix = text.substr(pos);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix == "IB" || suffix == "B") suffix.clear();
  if (suffix.size() == 3 && suffix.substr(1) == "IB") suffix = suffix.substr(0, 1);
  if (suffix.size() == 2 && suffix[1] == 'B') suffix = suffix.substr(0, 1);
  int shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (suffix == "T") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (shift && v > (UINT64_MAX >> shift)) return std::nullopt;
  return v << shift;
}

std::string HumanBytes(uint64_t b) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && u < 6) {
    v /= 1024;
    u++;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  } else if (v == std::floor(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

std::string HumanCount(uint64_t n) {
  char buf[32];
  if (n < 10'000) {
    std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(n));
  } else if (n < 10'000'000) {
    std::snprintf(buf, sizeof(buf), "%.1fk", static_cast<double>(n) / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1fM", static_cast<double>(n) / 1e6);
  }
  return buf;
}

std::string HumanUs(uint64_t us) {
  char buf[32];
  if (us < 1000) {
    std::snprintf(buf, sizeof(buf), "%lluus", static_cast<unsigned long long>(us));
  } else if (us < 1'000'000) {
    std::snprintf(buf, sizeof(buf), "%.1fms", static_cast<double>(us) / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fs", static_cast<double>(us) / 1e6);
  }
  return buf;
}

// --every: a whole number and a unit (s, m, h, d, w), or hourly, daily,
// weekly. Seconds, and the text as the default schedule name gives it (the
// number without leading zeros); nullopt with *error set otherwise.
struct Every {
  uint64_t seconds = 0;
  std::string text;
};
constexpr uint64_t kDay = 86400, kWeek = 7 * kDay;
constexpr uint64_t kEveryMax = 366 * kDay;  // fs/domain.h kScheduleEveryMax
std::optional<Every> ParseEvery(const std::string& text, std::string* error) {
  if (text == "hourly") return Every{3600, "1h"};
  if (text == "daily") return Every{kDay, "1d"};
  if (text == "weekly") return Every{kWeek, "1w"};
  *error =
      "--every takes a whole number and a unit, s, m, h, d or w (30s, 15m, 1h, 1d, 1w), or hourly, daily "
      "or weekly, not '" +
      nasgw::EscapeForTerminal(text) + "'";
  size_t pos = 0;
  uint64_t v = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    if (v <= kEveryMax) v = v * 10 + static_cast<uint64_t>(text[pos] - '0');  // past it: too long, said below
    pos++;
  }
  if (pos == 0 || pos + 1 != text.size()) {
    if (pos > 0 && pos == text.size()) *error += " (the unit is missing)";
    return std::nullopt;
  }
  static const std::map<char, uint64_t> kUnits = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', kDay}, {'w', kWeek}};
  auto unit = kUnits.find(text[pos]);
  if (unit == kUnits.end()) return std::nullopt;
  if (v == 0 || v > kEveryMax / unit->second) {
    *error = "--every must be from 1s to 366d, not '" + nasgw::EscapeForTerminal(text) + "'";
    return std::nullopt;
  }
  error->clear();
  return Every{v * unit->second, std::to_string(v) + text[pos]};
}

// An interval in the largest unit that says it exactly: 1h, 90m, 1w.
std::string EveryText(uint64_t s) {
  for (const auto& [unit, n] :
       std::vector<std::pair<char, uint64_t>>{{'w', kWeek}, {'d', kDay}, {'h', 3600}, {'m', 60}}) {
    if (s != 0 && s % n == 0) return std::to_string(s / n) + unit;
  }
  return std::to_string(s) + "s";
}

std::string HumanDuration(uint64_t s) {
  std::string out;
  if (s >= 86400) out += std::to_string(s / 86400) + "d ";
  if (s >= 3600) out += std::to_string(s % 86400 / 3600) + "h ";
  if (s >= 60) out += std::to_string(s % 3600 / 60) + "m ";
  out += std::to_string(s % 60) + "s";
  return out;
}

// ---- tables

// Cells and values are printed escaped (base/text.h): a name stored with
// control characters or invalid UTF-8 shows as \xNN and cannot act on the
// terminal.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { Add(std::move(header)); }
  void Add(std::vector<std::string> row) {
    for (auto& cell : row) cell = nasgw::EscapeForTerminal(cell);
    rows_.push_back(std::move(row));
  }
  // Columns in `right` are right-aligned (numbers).
  void Print(const std::set<size_t>& right = {}) const {
    std::vector<size_t> w;
    for (const auto& r : rows_) {
      for (size_t i = 0; i < r.size(); i++) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], Width(r[i]));
      }
    }
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); i++) {
        const std::string pad(w[i] - Width(r[i]), ' ');
        const bool last = i + 1 == r.size();
        line += right.contains(i) ? pad + r[i] : (last ? r[i] : r[i] + pad);
        if (!last) line += "  ";
      }
      std::cout << line << "\n";
    }
  }

 private:
  // Columns of an escaped cell: one per code point.
  static size_t Width(const std::string& escaped) {
    size_t n = 0;
    for (char c : escaped) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
    return n;
  }
  std::vector<std::vector<std::string>> rows_;
};

void PrintPairs(const std::vector<std::pair<std::string, std::string>>& pairs) {
  size_t w = 0;
  for (const auto& [k, v] : pairs) w = std::max(w, k.size());
  for (const auto& [k, v] : pairs) {
    std::cout << k << std::string(w - k.size() + 2, ' ') << nasgw::EscapeForTerminal(v) << "\n";
  }
}

// A value from the server in a line of prose.
std::string Esc(const std::string& s) {
  return nasgw::EscapeForTerminal(s);
}

// ---- messages to JSON (numbers stay numbers; proto3's JSON mapping would
// make every 64-bit counter a string)

std::string StateName(pb::ReserveState s) {
  switch (s) {
    case pb::RESERVE_STATE_UNFORMATTED:
      return "unformatted";
    case pb::RESERVE_STATE_ONLINE:
      return "online";
    case pb::RESERVE_STATE_FAILED:
      return "failed";
    case pb::RESERVE_STATE_STANDBY:
      return "standby";
    case pb::RESERVE_STATE_FENCED:
      return "fenced";
    default:
      return "unknown";
  }
}

json ToJson(const pb::Node& n) {
  return {{"name", n.name()},
          {"version", n.version()},
          {"started_unix", n.started_unix()},
          {"uptime_seconds", n.uptime_seconds()},
          {"reserve_state", StateName(n.reserve_state())},
          {"head_connections", n.head_connections()},
          {"head_requests", n.head_requests()}};
}

json ToJson(const pb::OpStats& s) {
  return {{"ops", s.ops()},
          {"bytes", s.bytes()},
          {"errors", s.errors()},
          {"latency_p50_us", s.latency_p50_us()},
          {"latency_p99_us", s.latency_p99_us()},
          {"latency_max_us", s.latency_max_us()},
          {"latency_mean_us", s.latency_mean_us()}};
}

json ToJson(const pb::LunIo& io) {
  return {{"read", ToJson(io.read())},   {"write", ToJson(io.write())}, {"other", ToJson(io.other())},
          {"in_flight", io.in_flight()}, {"queued", io.queued()},       {"retries", io.retries()},
          {"timeouts", io.timeouts()}};
}

// Bytes written to the array per byte clients wrote (0: none written yet).
double WriteAmplification(const pb::CacheStats& c) {
  return c.client_write_bytes() == 0
             ? 0.0
             : static_cast<double>(c.array_write_bytes()) / static_cast<double>(c.client_write_bytes());
}

// Hits per read, in per cent (-1: no reads yet).
double HitPct(uint64_t hits, uint64_t misses) {
  return hits + misses == 0 ? -1.0 : 100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses);
}

json ToJson(const pb::CacheStats& c) {
  return {{"memory_budget_bytes", c.memory_budget_bytes()},
          {"dirty_bytes", c.dirty_bytes()},
          {"dirty_limit_bytes", c.dirty_limit_bytes()},
          {"dirty_files", c.dirty_files()},
          {"clean_bytes", c.clean_bytes()},
          {"clean_capacity_bytes", c.clean_capacity_bytes()},
          {"read_hit_bytes", c.read_hit_bytes()},
          {"read_miss_bytes", c.read_miss_bytes()},
          {"read_ahead_bytes", c.read_ahead_bytes()},
          {"meta_bytes", c.meta_bytes()},
          {"meta_capacity_bytes", c.meta_capacity_bytes()},
          {"meta_hits", c.meta_hits()},
          {"meta_misses", c.meta_misses()},
          {"client_write_bytes", c.client_write_bytes()},
          {"writes_cached", c.writes_cached()},
          {"writes_logged", c.writes_logged()},
          {"writes_stable", c.writes_stable()},
          {"writes_log_slow", c.writes_log_slow()},
          {"commits_logged", c.commits_logged()},
          {"commits_flushed", c.commits_flushed()},
          {"flushes", c.flushes()},
          {"flush_bytes", c.flush_bytes()},
          {"flush_microseconds", c.flush_microseconds()},
          {"stalls", c.stalls()},
          {"stall_timeouts", c.stall_timeouts()},
          {"no_space", c.no_space()},
          {"array_write_bytes", c.array_write_bytes()},
          {"write_amplification", WriteAmplification(c)}};
}

json ToJson(const pb::Lun& l) {
  json paths = json::array();
  for (const auto& p : l.paths()) {
    paths.push_back({{"portal", p.portal()},
                     {"up", p.up()},
                     {"ops", p.ops()},
                     {"failures", p.failures()},
                     {"last_error", p.last_error()}});
  }
  return {{"index", l.index()},
          {"url", l.url()},
          {"serial", l.serial()},
          {"size_bytes", l.size_bytes()},
          {"allocation_groups", l.allocation_groups()},
          {"healthy", l.healthy()},
          {"paths_up", l.paths_up()},
          {"paths_total", l.paths_total()},
          {"io", ToJson(l.io())},
          {"paths", paths}};
}

json ToJson(const pb::Reserve& r) {
  json luns = json::array();
  for (const auto& l : r.luns()) luns.push_back(ToJson(l));
  return {{"state", StateName(r.state())},
          {"reason", r.reason()},
          {"name", r.name()},
          {"uuid", r.uuid()},
          {"ag_bytes", r.ag_bytes()},
          {"capacity_bytes", r.capacity_bytes()},
          {"free_bytes", r.free_bytes()},
          {"files", r.files()},
          {"generation", r.generation()},
          {"owner", r.owner()},
          {"owned_here", r.owned_here()},
          {"holder_silent_ms", r.holder_silent_ms()},
          {"lease_ms", r.lease_ms()},
          {"renewals", r.renewals()},
          {"fenced_total", r.fenced_total()},
          {"domains", r.domains()},
          {"luns", luns}};
}

// origin_volume and origin_snapshot: a clone's origin; empty for a volume
// that is not a clone.
json ToJson(const pb::Volume& v) {
  return {{"id", v.id()},
          {"name", v.name()},
          {"record_bytes", v.record_bytes()},
          {"files", v.files()},
          {"bytes", v.bytes()},
          {"write_through", v.write_through()},
          {"atime", v.atime()},
          {"snapshots", v.snapshots()},
          {"snapshot_bytes", v.snapshot_bytes()},
          {"origin_volume", v.origin_volume()},
          {"origin_snapshot", v.origin_snapshot()},
          {"domain", v.domain()}};
}

json ToJson(const pb::Snapshot& sn) {
  return {{"id", sn.id()},
          {"name", sn.name()},
          {"volume", sn.volume()},
          {"txg", sn.txg()},
          {"created_unix", sn.created_unix()},
          {"frees_bytes", sn.frees_bytes()},
          {"frees_meta_bytes", sn.frees_meta_bytes()}};
}

json ToJson(const pb::SnapshotSchedule& s) {
  return {{"volume", s.volume()},
          {"name", s.name()},
          {"every_seconds", s.every_seconds()},
          {"keep", s.keep()},
          {"last_run_unix", s.last_run_unix()},
          {"next_run_unix", s.next_run_unix()}};
}

json ToJson(const pb::Export& e) {
  return {{"id", e.id()},
          {"volume", e.volume()},
          {"path", e.path()},
          {"pseudo", e.pseudo()},
          {"clients", json(std::vector<std::string>(e.clients().begin(), e.clients().end()))},
          {"read_only", e.read_only()},
          {"root_squash", e.root_squash()},
          {"sec", json(std::vector<std::string>(e.sec().begin(), e.sec().end()))},
          {"protocols", json(std::vector<uint32_t>(e.protocols().begin(), e.protocols().end()))},
          {"show_snapshot_dir", e.show_snapshot_dir()}};
}

json ToJson(const pb::Share& sh) {
  return {{"name", sh.name()},
          {"volume", sh.volume()},
          {"path", sh.path()},
          {"comment", sh.comment()},
          {"read_only", sh.read_only()},
          {"browseable", sh.browseable()},
          {"encrypt", sh.encrypt()},
          {"guest_ok", sh.guest_ok()},
          {"valid_users", json(std::vector<std::string>(sh.valid_users().begin(), sh.valid_users().end()))}};
}

void PrintJson(const json& j) {
  std::cout << Dump(j) << "\n";
}

// ---- human output

void PrintReserve(const pb::Reserve& r) {
  std::vector<std::pair<std::string, std::string>> p;
  p.push_back({"state", StateName(r.state())});
  if (!r.reason().empty()) p.push_back({"reason", r.reason()});
  if (!r.owner().empty()) p.push_back({"owner", r.owner()});
  if (r.state() == pb::RESERVE_STATE_STANDBY || r.state() == pb::RESERVE_STATE_FENCED) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%.1f s (lease %.1f s)%s", static_cast<double>(r.holder_silent_ms()) / 1e3,
                  static_cast<double>(r.lease_ms()) / 1e3,
                  r.holder_silent_ms() >= r.lease_ms() ? ": expired, 'nasgw reserve takeover' may take it" : "");
    p.push_back({"holder silent", buf});
  }
  if (r.fenced_total() > 0) p.push_back({"times fenced", std::to_string(r.fenced_total())});
  if (r.state() == pb::RESERVE_STATE_ONLINE) {
    p.push_back({"name", r.name()});
    p.push_back({"uuid", r.uuid()});
    if (r.domains() > 1) p.push_back({"domains", std::to_string(r.domains())});
    p.push_back({"capacity", HumanBytes(r.capacity_bytes())});
    const double pct = r.capacity_bytes()
                           ? 100.0 * static_cast<double>(r.free_bytes()) / static_cast<double>(r.capacity_bytes())
                           : 0.0;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s (%.0f%%)", HumanBytes(r.free_bytes()).c_str(), pct);
    p.push_back({"free", buf});
    p.push_back({"files", std::to_string(r.files())});
    p.push_back({"group size", HumanBytes(r.ag_bytes())});
    p.push_back({"generation", std::to_string(r.generation())});
  }
  int healthy = 0;
  for (const auto& l : r.luns()) healthy += l.healthy() ? 1 : 0;
  p.push_back({"luns", std::to_string(r.luns_size()) + " (" + std::to_string(healthy) + " healthy)"});
  PrintPairs(p);
}

void PrintLuns(const pb::Reserve& r) {
  Table t({"#", "URL", "SERIAL", "SIZE", "GROUPS", "HEALTH", "PATHS", "READS", "WRITES", "ERRORS"});
  for (const auto& l : r.luns()) {
    const auto& io = l.io();
    t.Add({std::to_string(l.index()), l.url(), l.serial().empty() ? "-" : l.serial(), HumanBytes(l.size_bytes()),
           std::to_string(l.allocation_groups()), l.healthy() ? "ok" : "DOWN",
           std::to_string(l.paths_up()) + "/" + std::to_string(l.paths_total()), HumanCount(io.read().ops()),
           HumanCount(io.write().ops()),
           std::to_string(io.read().errors() + io.write().errors() + io.other().errors())});
  }
  t.Print({0, 3, 4, 7, 8, 9});
}

// A clone's origin, VOLUME@SNAPSHOT; "-" for a volume that is not a clone.
std::string OriginText(const pb::Volume& v) {
  if (v.origin_volume().empty() && v.origin_snapshot().empty()) return "-";
  return v.origin_volume() + "@" + v.origin_snapshot();
}

void PrintVolume(const pb::Volume& v) {
  std::vector<std::pair<std::string, std::string>> p = {{"name", v.name()},
                                                        {"id", std::to_string(v.id())},
                                                        {"record size", HumanBytes(v.record_bytes())},
                                                        {"files", std::to_string(v.files())},
                                                        {"used", HumanBytes(v.bytes())},
                                                        {"snapshots", std::to_string(v.snapshots())},
                                                        {"snapshot used", HumanBytes(v.snapshot_bytes())},
                                                        {"write-through", v.write_through() ? "on (strict)" : "off"},
                                                        {"atime", v.atime()},
                                                        {"domain", std::to_string(v.domain())}};
  // Only a clone has the line: the snapshot it was made from (its data is shared).
  if (OriginText(v) != "-") p.push_back({"origin", OriginText(v) + " (a clone)"});
  PrintPairs(p);
}

// A time from the server, in UTC: 2026-11-23 11:18:42Z.
std::string UtcTime(int64_t unix_seconds) {
  const auto t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  if (gmtime_r(&t, &tm) == nullptr) return std::to_string(unix_seconds);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

void PrintSnapshot(const pb::Snapshot& sn) {
  PrintPairs({{"name", sn.name()},
              {"volume", sn.volume()},
              {"id", std::to_string(sn.id())},
              {"created", UtcTime(sn.created_unix())},
              {"txg", std::to_string(sn.txg())},
              {"frees", HumanBytes(sn.frees_bytes()) + " of data, " + HumanBytes(sn.frees_meta_bytes()) +
                            " of metadata (what deleting it gives back now)"}});
}

void PrintSchedule(const pb::SnapshotSchedule& s) {
  PrintPairs({{"volume", s.volume()},
              {"name", s.name()},
              {"every", EveryText(s.every_seconds())},
              {"keep", std::to_string(s.keep()) + " of its snapshots"},
              {"snapshots", s.name() + "-YYYYMMDDTHHMMSSZ (UTC)"},
              {"last run", s.last_run_unix() == 0 ? "never" : UtcTime(s.last_run_unix())},
              {"next run", s.next_run_unix() == 0 ? "now (within a second)" : UtcTime(s.next_run_unix())}});
}

template <typename List>
std::string JoinList(const List& items, const std::string& sep) {
  std::string out;
  for (const auto& i : items) {
    if (!out.empty()) out += sep;
    if constexpr (std::is_integral_v<std::decay_t<decltype(i)>>) {
      out += std::to_string(i);
    } else {
      out += i;
    }
  }
  return out;
}

void PrintExport(const pb::Export& e) {
  std::string versions;
  for (uint32_t p : e.protocols()) versions += (versions.empty() ? "NFSv" : ", NFSv") + std::to_string(p);
  PrintPairs({{"id", std::to_string(e.id())},
              {"pseudo", e.pseudo()},
              {"volume", e.volume()},
              {"path", e.path()},
              {"access", e.read_only() ? "read-only" : "read-write"},
              {"clients", e.clients().empty() ? "every client" : JoinList(e.clients(), ", ")},
              {"root squash", e.root_squash() ? "yes (root is 65534)" : "no"},
              {"security", JoinList(e.sec(), ", ")},
              {"protocols", versions},
              {".snapshot", e.show_snapshot_dir() ? "listed in every directory" : "reachable by name, not listed"}});
}

void PrintShare(const pb::Share& sh) {
  std::vector<std::pair<std::string, std::string>> p = {
      {"name", sh.name()},
      {"volume", sh.volume()},
      {"path", sh.path()},
      {"access", sh.read_only() ? "read-only" : "read-write"},
      {"users", sh.valid_users().empty() ? "every authenticated user" : JoinList(sh.valid_users(), ", ")},
      {"browseable", sh.browseable() ? "yes" : "no (hidden)"},
      {"encryption", sh.encrypt() ? "required" : "as the client offers"},
      {"guest", sh.guest_ok() ? "allowed" : "no"}};
  if (!sh.comment().empty()) p.push_back({"comment", sh.comment()});
  PrintPairs(p);
}

json ToJson(const pb::Cluster& c) {
  json peers = json::array();
  for (const auto& p : c.peers()) {
    peers.push_back({{"name", p.name()},
                     {"node_id", p.node_id()},
                     {"state", p.state()},
                     {"reason", p.reason()},
                     {"ring_node", p.ring_node()},
                     {"heard_ms_ago", p.heard_ms_ago()},
                     {"heartbeats", p.heartbeats()},
                     {"left", p.left()}});
  }
  json events = json::array();
  for (const auto& e : c.last_takeover()) {
    events.push_back({{"wall_unix_ns", e.wall_unix_ns()}, {"after_ms", e.after_ms()}, {"what", e.what()}});
  }
  return {{"enabled", c.enabled()},
          {"interconnect", c.interconnect()},
          {"connected", c.connected()},
          {"quorate", c.quorate()},
          {"interconnect_reason", c.interconnect_reason()},
          {"ring_node", c.ring_node()},
          {"members", c.members()},
          {"peers", peers},
          {"owner", c.owner()},
          {"owned_here", c.owned_here()},
          {"verdict", c.verdict()},
          {"why", c.why()},
          {"network_silent_ms", c.network_silent_ms()},
          {"disk_silent_ms", c.disk_silent_ms()},
          {"lease_ms", c.lease_ms()},
          {"auto_takeover", c.auto_takeover()},
          {"degraded", c.degraded()},
          {"mirror", c.mirror()},
          {"takeovers", c.takeovers()},
          {"last_takeover", events},
          {"vip_interface", c.vip_interface()},
          {"vips", std::vector<std::string>(c.vips().begin(), c.vips().end())},
          {"vips_held", std::vector<std::string>(c.vips_held().begin(), c.vips_held().end())},
          {"vips_partner", std::vector<std::string>(c.vips_partner().begin(), c.vips_partner().end())},
          {"forwarding", c.forwarding()},
          {"partner_connections", c.partner_connections()},
          {"tickles_sent", c.tickles_sent()},
          {"partner_nfs_clients", c.partner_nfs_clients()},
          {"takeover_graces", c.takeover_graces()},
          {"partner_nlm_clients", c.partner_nlm_clients()},
          {"nlm_notified", c.nlm_notified()},
          {"nlm_unreachable", c.nlm_unreachable()},
          {"vip_error", c.vip_error()}};
}

void PrintCluster(const pb::Cluster& c) {
  if (!c.enabled()) {
    // Aligned as the full report's first line.
    std::cout << "cluster        disabled (single node: [cluster] enabled = false)\n";
    return;
  }
  std::vector<std::pair<std::string, std::string>> p;
  std::string head = "enabled (" + c.interconnect() + ")";
  if (c.connected()) {
    head += ", joined as ring node " + std::to_string(c.ring_node()) + ", " +
            (c.quorate() ? "quorate" : "NOT quorate") + ", " + std::to_string(c.members()) +
            (c.members() == 1 ? " member" : " members");
  } else {
    head += ", NOT joined" + (c.interconnect_reason().empty() ? "" : ": " + c.interconnect_reason());
  }
  p.push_back({"cluster", head});
  p.push_back({"owner", c.owner().empty() ? "none known" : c.owner()});
  p.push_back({"verdict", c.verdict() + (c.why().empty() ? "" : ": " + c.why())});
  if (!c.owned_here()) {
    // The owner's two heartbeats, as this node hears them.
    p.push_back({"heartbeats", "network silent " + std::to_string(c.network_silent_ms()) + " ms, disk silent " +
                                   std::to_string(c.disk_silent_ms()) + " ms (lease " + std::to_string(c.lease_ms()) +
                                   " ms)"});
  }
  std::string degraded = "no";
  if (c.degraded()) {
    degraded = c.owned_here() ? "yes: the partner is not heard on the interconnect"
                              : "yes: the owner's heartbeats: " + c.verdict();
  }
  p.push_back({"degraded", degraded});
  p.push_back({"mirror", c.mirror()});
  p.push_back({"auto-takeover", c.auto_takeover() ? "on" : "off"});
  p.push_back({"takeovers", std::to_string(c.takeovers())});
  if (!c.forwarding().empty()) p.push_back({"forwarding", c.forwarding()});
  if (!c.vips().empty()) {
    std::string v;
    for (const auto& a : c.vips()) {
      const bool held = std::find(c.vips_held().begin(), c.vips_held().end(), a) != c.vips_held().end();
      const bool partner = std::find(c.vips_partner().begin(), c.vips_partner().end(), a) != c.vips_partner().end();
      v += (v.empty() ? "" : ", ") + a + (held ? " (held here)" : partner ? " (held by the partner)" : "");
    }
    p.push_back({"vips", v + " on " + c.vip_interface() + (c.vip_error().empty() ? "" : "; ERROR: " + c.vip_error())});
    p.push_back({"clients", "the partner has " + std::to_string(c.partner_connections()) +
                                " client connections to the addresses (as it last listed them); " +
                                std::to_string(c.tickles_sent()) + " tickle ACKs sent from here"});
  }
  if (c.partner_nfs_clients() >= 0) {
    p.push_back({"reclaims", std::to_string(c.partner_nfs_clients()) +
                                 " NFSv4 clients of the partner may reclaim here after a takeover; " +
                                 std::to_string(c.takeover_graces()) + " grace periods started"});
  }
  if (c.partner_nlm_clients() >= 0) {
    p.push_back({"nlm", std::to_string(c.partner_nlm_clients()) +
                            " NLM clients of the partner are told to reclaim here after a takeover; " +
                            std::to_string(c.nlm_notified()) + " notified, " + std::to_string(c.nlm_unreachable()) +
                            " unreachable"});
  }
  if (c.peers().empty()) p.push_back({"peers", "none heard"});
  for (const auto& peer : c.peers()) {
    std::string v = peer.state();
    if (!peer.reason().empty()) v += " (" + peer.reason() + ")";
    v += ", ring node " + std::to_string(peer.ring_node());
    v += peer.left() ? ", left the group, last heard " : ", heard ";
    v += std::to_string(peer.heard_ms_ago()) + " ms ago (" + std::to_string(peer.heartbeats()) +
         (peer.heartbeats() == 1 ? " heartbeat)" : " heartbeats)");
    p.push_back({"peer " + (peer.name().empty() ? peer.node_id() : peer.name()), v});
  }
  bool first = true;
  for (const auto& e : c.last_takeover()) {
    p.push_back({first ? "last takeover" : "", "+" + std::to_string(e.after_ms()) + " ms " + e.what()});
    first = false;
  }
  PrintPairs(p);
}

// ---- the connection

struct Options {
  std::string socket;
  std::string server;
  std::string tls_ca, tls_cert, tls_key;
  double timeout_s = 30;
};

std::string Endpoint(const Options& o) {
  return o.server.empty() ? "unix:" + o.socket : o.server;
}

Failure ReadPem(const std::string& path, const char* what, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {kExitUsage, std::string("cannot read ") + what + " " + path, "USAGE"};
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return {kExitOk, "", ""};
}

// Connects to the admin socket once, to tell the usual reasons apart before
// gRPC hides them behind "unavailable": none there, not ours to open (the
// socket is root's, mode 0600), nobody listening.
std::optional<Failure> ProbeSocket(const std::string& path) {
  const std::string hint = " (is nasgwd running? check 'systemctl status nasgwd', or pass --socket PATH)";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Failure{kExitUsage,
                   "--socket " + path + " is longer than " + std::to_string(sizeof(addr.sun_path) - 1) +
                       " bytes (a Unix socket path)",
                   "USAGE"};
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;  // gRPC will say
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(fd);
  if (rc == 0) return std::nullopt;
  if (err == ENOENT || err == ENOTDIR) {
    return Failure{kExitUnreachable, "cannot reach nasgwd: no socket at " + path + hint, "UNREACHABLE"};
  }
  if (err == EACCES || err == EPERM) {
    return Failure{kExitUnreachable,
                   "cannot reach nasgwd: permission denied opening " + path +
                       " (the admin socket is root's, mode 0600: run nasgw as root, or use --server with TLS)",
                   "PERMISSION_DENIED"};
  }
  if (err == ECONNREFUSED) {
    return Failure{kExitUnreachable, "cannot reach nasgwd: nothing listens on " + path + hint, "UNREACHABLE"};
  }
  return Failure{kExitUnreachable, "cannot reach nasgwd at " + path + ": " + std::strerror(err), "UNREACHABLE"};
}

class Client {
 public:
  // Connects (within the timeout); a failure is exit 3 naming the endpoint.
  static std::optional<Failure> Connect(const Options& o, std::unique_ptr<Client>* out) {
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (o.server.empty()) {
      creds = grpc::InsecureChannelCredentials();
      if (auto f = ProbeSocket(o.socket)) return f;
    } else {
      grpc::SslCredentialsOptions tls;
      if (!o.tls_ca.empty()) {
        if (auto f = ReadPem(o.tls_ca, "--tls-ca", &tls.pem_root_certs); f.exit_code) return f;
      }
      if (!o.tls_cert.empty()) {
        if (auto f = ReadPem(o.tls_cert, "--tls-cert", &tls.pem_cert_chain); f.exit_code) return f;
        if (auto f = ReadPem(o.tls_key, "--tls-key", &tls.pem_private_key); f.exit_code) return f;
      }
      creds = grpc::SslCredentials(tls);
    }
    grpc::ChannelArguments args;
    // Fail fast: one connection attempt, then report (the CLI is not a daemon).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    auto channel = grpc::CreateCustomChannel(Endpoint(o), creds, args);
    const auto deadline =
        std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    grpc_connectivity_state state = channel->GetState(true);
    while (state != GRPC_CHANNEL_READY) {
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN ||
          !channel->WaitForStateChange(state, deadline)) {
        const bool timed_out = state != GRPC_CHANNEL_TRANSIENT_FAILURE && state != GRPC_CHANNEL_SHUTDOWN;
        std::string m = "cannot reach nasgwd at " + Endpoint(o) + (timed_out ? ": no answer within the timeout" : "");
        if (o.server.empty()) {
          m += " (is nasgwd running? check 'systemctl status nasgwd', or pass --socket PATH)";
        } else {
          m += " (is nasgwd running with admin.tcp set? a TLS handshake failure also ends here: check --tls-ca, "
               "--tls-cert and --tls-key against the server's certificate and client CA)";
        }
        return Failure{kExitUnreachable, m, "UNREACHABLE"};
      }
      state = channel->GetState(true);
    }
    out->reset(new Client(pb::Admin::NewStub(channel), o));
    return std::nullopt;
  }

  // `at_least_ms`: a call that waits on the server (cluster takeover) is
  // given at least that long, whatever --timeout says.
  template <typename Req, typename Resp>
  std::optional<Failure> Call(grpc::Status (pb::Admin::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                              const Req& req, Resp* resp, int64_t at_least_ms = 0) {
    grpc::ClientContext ctx;
    const int64_t ms = std::max(static_cast<int64_t>(options_.timeout_s * 1000), at_least_ms);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
    grpc::Status s = (stub_.get()->*method)(&ctx, req, resp);
    if (s.ok()) return std::nullopt;
    return FromGrpc(s);
  }

 private:
  Client(std::unique_ptr<pb::Admin::Stub> stub, const Options& o) : stub_(std::move(stub)), options_(o) {}

  Failure FromGrpc(const grpc::Status& s) const {
    std::string m = s.error_message();
    switch (s.error_code()) {
      case grpc::StatusCode::NOT_FOUND:
        return {kExitNotFound, m, "NOT_FOUND"};
      case grpc::StatusCode::ALREADY_EXISTS:
        return {kExitExists, m, "ALREADY_EXISTS"};
      case grpc::StatusCode::FAILED_PRECONDITION:
        return {kExitRefused, m, "FAILED_PRECONDITION"};
      case grpc::StatusCode::INVALID_ARGUMENT:
        return {kExitUsage, m, "INVALID_ARGUMENT"};
      case grpc::StatusCode::DEADLINE_EXCEEDED: {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "no answer from nasgwd within %gs (--timeout)", options_.timeout_s);
        return {kExitFailed, buf, "DEADLINE_EXCEEDED"};
      }
      case grpc::StatusCode::UNAVAILABLE:
        return {kExitFailed, m, "UNAVAILABLE"};
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return {kExitFailed, m, "RESOURCE_EXHAUSTED"};
      case grpc::StatusCode::PERMISSION_DENIED:
        return {kExitFailed, m, "PERMISSION_DENIED"};
      default:
        return {kExitFailed, m.empty() ? "nasgwd failed the request" : m, "INTERNAL"};
    }
  }

  std::unique_ptr<pb::Admin::Stub> stub_;
  Options options_;
};

// ---- the command line

struct Parsed {
  Options options;
  bool help = false;
  std::vector<std::string> words;             // group, verb, positionals
  std::map<std::string, std::string> values;  // command options with a value
  std::set<std::string> flags;
};

const std::set<std::string> kGlobalValued = {"--socket",   "--server",  "--tls-ca",
                                             "--tls-cert", "--tls-key", "--timeout"};
const std::set<std::string> kCommandValued = {
    "--name",  "--ag-size", "--record-size", "--pseudo", "--clients", "--sec",        "--protocols", "--write-through",
    "--atime", "--comment", "--valid-users", "--every",  "--keep",    "--timeout-ms", "--domains",   "--domain"};
const std::set<std::string> kCommandFlags = {"--force",     "--ro",         "--no-root-squash",
                                             "--read-only", "--browseable", "--hidden",
                                             "--encrypt",   "--guest-ok",   "--show-snapshot-dir"};

// Returns a usage message, or "" when the arguments parse.
std::string Parse(int argc, char** argv, Parsed* p) {
  const char* env = std::getenv("NASGW_ADMIN_SOCKET");
  p->options.socket = env && *env ? env : kDefaultSocket;
  bool only_words = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (only_words || a.empty() || a[0] != '-' || a == "-") {
      p->words.push_back(a);
      continue;
    }
    if (a == "--") {
      only_words = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      p->help = true;
      continue;
    }
    if (a == "--json") {
      g_json = true;
      continue;
    }
    std::string value;
    bool has_value = false;
    if (const size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    const bool valued = kGlobalValued.contains(a) || kCommandValued.contains(a);
    if (!valued && !kCommandFlags.contains(a)) return "unknown option '" + a + "'";
    if (!valued) {
      if (has_value) return "option " + a + " takes no value";
      p->flags.insert(a);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return "option " + a + " needs a value";
      value = argv[++i];
    }
    if (a == "--socket") {
      p->options.socket = value;
    } else if (a == "--server") {
      p->options.server = value;
    } else if (a == "--tls-ca") {
      p->options.tls_ca = value;
    } else if (a == "--tls-cert") {
      p->options.tls_cert = value;
    } else if (a == "--tls-key") {
      p->options.tls_key = value;
    } else if (a == "--timeout") {
      char* end = nullptr;
      const double t = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(t > 0) || t > 86400) {
        return "--timeout takes a number of seconds (0 < SECONDS <= 86400), not '" + value + "'";
      }
      p->options.timeout_s = t;
    } else {
      p->values[a] = value;
    }
  }
  if (p->options.tls_cert.empty() != p->options.tls_key.empty()) return "--tls-cert and --tls-key go together";
  if (p->options.server.empty() && (!p->options.tls_ca.empty() || !p->options.tls_cert.empty())) {
    return "--tls-ca, --tls-cert and --tls-key are for --server";
  }
  if (p->options.socket.empty()) return "--socket is empty";
  return "";
}

// Words the verb takes: 0 (a group alone, "stats"), 1, or 2 ("schedule add").
size_t VerbWords(const CommandSpec& c) {
  return c.verb.empty() ? 0 : 1 + static_cast<size_t>(std::count(c.verb.begin(), c.verb.end(), ' '));
}

const CommandSpec* Find(const std::vector<std::string>& words) {
  for (const auto& c : Commands()) {
    if (words.empty() || words[0] != c.group) continue;
    if (c.verb.empty()) return &c;
    const size_t n = VerbWords(c);
    if (words.size() <= n) continue;
    std::string verb = words[1];
    for (size_t i = 2; i <= n; i++) verb += " " + words[i];
    if (verb == c.verb) return &c;
  }
  return nullptr;
}

std::optional<uint64_t> SizeOption(const Parsed& p, const std::string& name, std::string* error) {
  auto it = p.values.find(name);
  if (it == p.values.end()) return std::nullopt;
  auto v = ParseSize(it->second);
  if (!v) *error = name + " takes a size such as 4K, 128K, 1M or 1G, not '" + it->second + "'";
  return v;
}

// The hint added to a refusal that --force would override.
std::string ForceHint(const CommandSpec& c, const std::vector<std::string>& args) {
  if (c.group == "volume" && c.verb == "delete") {
    return "; use --force to delete it with its files (nasgw volume delete " + args[0] + " --force)";
  }
  if (c.group == "reserve" && c.verb == "format") return "; use --force to format over it";
  if (c.group == "reserve" && c.verb == "add-lun") return "; use --force to overwrite that LUN's label";
  return "";
}

// A comma-separated option value; empty entries are a usage error.
std::optional<std::vector<std::string>> ListOption(const Parsed& p, const std::string& name, std::string* error) {
  auto it = p.values.find(name);
  if (it == p.values.end()) return std::nullopt;
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(it->second);
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) {
      *error = name + " has an empty entry in '" + it->second + "'";
      return std::nullopt;
    }
    out.push_back(item.substr(b, e - b + 1));
  }
  if (out.empty() || it->second.back() == ',') {
    *error = name + " has an empty entry in '" + it->second + "'";
    return std::nullopt;
  }
  return out;
}

// An export id: a decimal number 1..UINT32_MAX.
std::optional<uint32_t> ParseExportId(const std::string& text) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const uint64_t v = std::stoull(text);
  if (v == 0 || v > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(v);
}

int Run(const CommandSpec& c, const std::vector<std::string>& args, const Parsed& p) {
  const std::string hint = "nasgw " + c.group + (c.verb.empty() ? "" : " " + c.verb);
  std::string size_error;
  const auto ag = SizeOption(p, "--ag-size", &size_error);
  const auto rs = SizeOption(p, "--record-size", &size_error);
  if (!size_error.empty()) return Usage(size_error, hint);
  // The file system's bounds (fs/domain.h kRecordBytesMin..Max, kAgBytesMin..Max);
  // nasgwd checks them again. 0 is refused: it is not "the default".
  auto power_of_two_in = [](uint64_t v, uint64_t lo, uint64_t hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; };
  if (rs && !power_of_two_in(*rs, 4 << 10, 1 << 20)) {
    return Usage("--record-size must be a power of two from 4K to 1M, not '" + Esc(p.values.at("--record-size")) + "'",
                 hint);
  }
  if (ag && !power_of_two_in(*ag, 1ull << 20, 64ull << 30)) {
    return Usage("--ag-size must be a power of two from 1M to 64G, not '" + Esc(p.values.at("--ag-size")) + "'", hint);
  }
  if (c.verb == "format" && !p.values.contains("--name")) return Usage("reserve format needs --name NAME", hint);
  // --domains 1..28 (fs::kReserveDomainsMax), --domain 0..27; nasgwd checks
  // them again (and --domain against the reserve's count).
  auto number_in = [&p](const char* option, uint32_t lo, uint32_t hi) -> std::optional<uint32_t> {
    const std::string& t = p.values.at(option);
    if (t.empty() || t.size() > 3 || t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const auto v = static_cast<uint32_t>(std::stoul(t));
    if (v < lo || v > hi) return std::nullopt;
    return v;
  };
  std::optional<uint32_t> domains, domain;
  if (p.values.contains("--domains") && !(domains = number_in("--domains", 1, 28))) {
    return Usage("--domains is a number from 1 to 28, not '" + Esc(p.values.at("--domains")) + "'", hint);
  }
  if (p.values.contains("--domain") && !(domain = number_in("--domain", 0, 27))) {
    return Usage("--domain is a number from 0 to 27, not '" + Esc(p.values.at("--domain")) + "'", hint);
  }
  std::optional<bool> write_through;
  if (p.values.contains("--write-through")) {
    const std::string& w = p.values.at("--write-through");
    if (w != "on" && w != "off") return Usage("--write-through is on or off, not '" + Esc(w) + "'", hint);
    write_through = w == "on";
  }
  std::optional<std::string> atime;
  if (p.values.contains("--atime")) {
    atime = p.values.at("--atime");
    if (*atime != "relatime" && *atime != "strictatime" && *atime != "noatime") {
      return Usage("--atime is relatime, strictatime or noatime, not '" + Esc(*atime) + "'", hint);
    }
  }
  if (c.verb == "set" && !rs && !write_through && !atime) {
    return Usage("volume set needs a setting to change (--record-size SIZE, --write-through on|off, --atime POLICY)",
                 hint);
  }

  // Export arguments, checked before connecting.
  pb::AddExportRequest add_export;
  pb::GetExportRequest get_export;
  uint32_t export_id = 0;
  if (c.group == "export" && c.verb == "add") {
    const std::string& target = args[0];
    const size_t slash = target.find('/');
    add_export.set_volume(target.substr(0, slash));
    if (add_export.volume().empty())
      return Usage("give the volume first: VOLUME[/SUBPATH], not '" + target + "'", hint);
    if (slash != std::string::npos) add_export.set_path(target.substr(slash));
    if (auto it = p.values.find("--pseudo"); it != p.values.end()) {
      if (it->second.empty()) return Usage("--pseudo is empty", hint);
      add_export.set_pseudo(it->second);
    }
    std::string error;
    const auto clients = ListOption(p, "--clients", &error);
    const auto sec = ListOption(p, "--sec", &error);
    const auto protocols = ListOption(p, "--protocols", &error);
    if (!error.empty()) return Usage(error, hint);
    if (clients) {
      for (const auto& x : *clients) add_export.add_clients(x);
    }
    if (sec) {
      for (const auto& x : *sec) add_export.add_sec(x);
    }
    if (protocols) {
      for (const auto& x : *protocols) {
        if (x != "3" && x != "4") return Usage("--protocols takes NFS versions 3 and/or 4, not '" + x + "'", hint);
        add_export.add_protocols(static_cast<uint32_t>(std::stoul(x)));
      }
    }
    add_export.set_read_only(p.flags.contains("--ro"));
    if (p.flags.contains("--no-root-squash")) add_export.set_root_squash(false);
    add_export.set_show_snapshot_dir(p.flags.contains("--show-snapshot-dir"));
  } else if (c.group == "export" && c.verb == "show") {
    if (auto id = ParseExportId(args[0])) {
      get_export.set_id(*id);
    } else if (!args[0].empty() && args[0][0] == '/') {
      get_export.set_pseudo(args[0]);
    } else {
      return Usage("an export is named by its id (a number from 1) or its pseudo path (/...), not '" + args[0] + "'",
                   hint);
    }
  } else if (c.group == "export" && c.verb == "remove") {
    auto id = ParseExportId(args[0]);
    if (!id) return Usage("export remove takes an export id (a number from 1), not '" + args[0] + "'", hint);
    export_id = *id;
  }

  // Share arguments, checked before connecting.
  pb::AddShareRequest add_share;
  if (c.group == "share" && c.verb == "add") {
    const std::string& target = args[0];
    const size_t slash = target.find('/');
    add_share.set_volume(target.substr(0, slash));
    if (add_share.volume().empty()) {
      return Usage("give the volume first: VOLUME[/SUBPATH], not '" + target + "'", hint);
    }
    if (slash != std::string::npos) add_share.set_path(target.substr(slash));
    auto name = p.values.find("--name");
    if (name == p.values.end() || name->second.empty()) return Usage("share add needs --name NAME", hint);
    add_share.set_name(name->second);
    if (auto it = p.values.find("--comment"); it != p.values.end()) add_share.set_comment(it->second);
    std::string error;
    const auto users = ListOption(p, "--valid-users", &error);
    if (!error.empty()) return Usage(error, hint);
    if (users) {
      for (const auto& u : *users) add_share.add_valid_users(u);
    }
    if (p.flags.contains("--browseable") && p.flags.contains("--hidden")) {
      return Usage("--browseable and --hidden contradict each other", hint);
    }
    add_share.set_read_only(p.flags.contains("--read-only"));
    if (p.flags.contains("--hidden")) add_share.set_browseable(false);
    add_share.set_encrypt(p.flags.contains("--encrypt"));
    add_share.set_guest_ok(p.flags.contains("--guest-ok"));
  }

  // Schedule arguments, checked before connecting.
  pb::AddSnapshotScheduleRequest add_schedule;
  if (c.group == "snapshot" && c.verb == "schedule add") {
    add_schedule.set_volume(args[0]);
    auto every = p.values.find("--every");
    auto keep = p.values.find("--keep");
    if (every == p.values.end() || keep == p.values.end()) {
      return Usage("snapshot schedule add needs --every DURATION and --keep N", hint);
    }
    std::string error;
    const auto e = ParseEvery(every->second, &error);
    if (!e) return Usage(error, hint);
    add_schedule.set_every_seconds(e->seconds);
    const std::string& k = keep->second;
    if (k.empty() || k.size() > 5 || k.find_first_not_of("0123456789") != std::string::npos || std::stoul(k) == 0 ||
        std::stoul(k) > 10000) {
      return Usage("--keep takes how many snapshots to keep, 1 to 10000, not '" + Esc(k) + "'", hint);
    }
    add_schedule.set_keep(static_cast<uint32_t>(std::stoul(k)));
    if (auto n = p.values.find("--name"); n != p.values.end()) {
      if (n->second.empty()) return Usage("--name is empty", hint);
      add_schedule.set_name(n->second);
    } else {
      add_schedule.set_name(e->seconds == 3600    ? "hourly"
                            : e->seconds == kDay  ? "daily"
                            : e->seconds == kWeek ? "weekly"
                                                  : "every-" + e->text);
    }
  }

  // Cluster takeover's wait, checked before connecting.
  uint32_t takeover_timeout_ms = 0;  // 0: nasgwd's default (30000)
  if (auto it = p.values.find("--timeout-ms"); it != p.values.end()) {
    const std::string& t = it->second;
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos || std::stoul(t) == 0 ||
        std::stoul(t) > 600000) {
      return Usage("--timeout-ms takes milliseconds, 1 to 600000, not '" + Esc(t) + "'", hint);
    }
    takeover_timeout_ms = static_cast<uint32_t>(std::stoul(t));
  }

  std::unique_ptr<Client> client;
  if (auto f = Client::Connect(p.options, &client)) return Fail(*f);
  const bool force = p.flags.contains("--force");

  auto fail = [&](Failure f) {
    // Only refusals --force overrides get the hint (an exported volume's
    // deletion is refused even with --force).
    const bool forceable = f.message.find("force") != std::string::npos;
    if ((f.exit_code == kExitRefused || f.exit_code == kExitExists) && forceable) f.message += ForceHint(c, args);
    if (f.exit_code == kExitRefused && c.group == "snapshot" && c.verb == "delete" &&
        f.message.find("has clones") != std::string::npos) {
      f.message += " (a clone is a volume: nasgw volume delete NAME --force)";
    }
    if (f.exit_code == kExitRefused && c.group == "volume" && c.verb == "delete" && !forceable) {
      if (f.message.find("NFS") != std::string::npos) {
        f.message += " (nasgw export list shows them; nasgw export remove ID)";
      }
      if (f.message.find("SMB") != std::string::npos) {
        f.message += " (nasgw share list shows them; nasgw share remove NAME)";
      }
    }
    return Fail(f);
  };

  if (c.group == "node") {
    pb::GetNodeResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::GetNode, pb::GetNodeRequest(), &r)) return fail(*f);
    pb::GetReserveResponse rr;
    if (auto f = client->Call(&pb::Admin::Stub::GetReserve, pb::GetReserveRequest(), &rr)) return fail(*f);
    const auto& res = rr.reserve();
    if (g_json) {
      json j = ToJson(r.node());
      j["reserve_owner"] = res.owner();
      j["reserve_reason"] = res.reason();
      j["reserve_fenced_total"] = res.fenced_total();
      PrintJson({{"node", j}});
    } else {
      const auto& n = r.node();
      std::vector<std::pair<std::string, std::string>> pairs = {{"node", n.name()},
                                                                {"version", n.version()},
                                                                {"uptime", HumanDuration(n.uptime_seconds())},
                                                                {"reserve", StateName(n.reserve_state())}};
      if (!res.owner().empty()) pairs.push_back({"owner", res.owner()});
      if (!res.reason().empty()) pairs.push_back({"reason", res.reason()});
      pairs.push_back({"heads", std::to_string(n.head_connections()) + " connections, " +
                                    std::to_string(n.head_requests()) + " requests"});
      PrintPairs(pairs);
    }
    return kExitOk;
  }
  if (c.group == "reserve" && (c.verb == "status" || c.verb == "luns")) {
    pb::GetReserveResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::GetReserve, pb::GetReserveRequest(), &r)) return fail(*f);
    if (c.verb == "status") {
      if (g_json) {
        PrintJson({{"reserve", ToJson(r.reserve())}});
      } else {
        PrintReserve(r.reserve());
      }
    } else {
      if (g_json) {
        json luns = json::array();
        for (const auto& l : r.reserve().luns()) luns.push_back(ToJson(l));
        PrintJson({{"luns", luns}});
      } else {
        PrintLuns(r.reserve());
      }
    }
    return kExitOk;
  }
  if (c.group == "cluster" && c.verb == "status") {
    pb::GetClusterResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::GetCluster, pb::GetClusterRequest(), &r)) return fail(*f);
    if (g_json) {
      PrintJson({{"cluster", ToJson(r.cluster())}});
    } else {
      PrintCluster(r.cluster());
    }
    return kExitOk;
  }
  if (c.group == "cluster" && (c.verb == "giveback" || c.verb == "takeover")) {
    pb::Cluster after;
    std::string done;
    if (c.verb == "giveback") {
      pb::ClusterGiveBackResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::ClusterGiveBack, pb::ClusterGiveBackRequest(), &r)) return fail(*f);
      after = r.cluster();
      done = "gave the reserve back: this node stands by, the partner takes it over";
    } else {
      pb::ClusterTakeoverRequest req;
      req.set_timeout_ms(takeover_timeout_ms);
      pb::ClusterTakeoverResponse r;
      // The server waits up to the timeout (30 s by default) for the reserve,
      // then answers: the call gets that and some more.
      const int64_t wait_ms = takeover_timeout_ms == 0 ? 30000 : takeover_timeout_ms;
      if (auto f = client->Call(&pb::Admin::Stub::ClusterTakeover, req, &r, wait_ms + 10000)) return fail(*f);
      after = r.cluster();
      done = "took the reserve over from the partner: it is online here";
    }
    if (g_json) {
      PrintJson({{"result", done}, {"cluster", ToJson(after)}});
    } else {
      std::cout << done << "\n";
      PrintCluster(after);
    }
    return kExitOk;
  }
  if (c.verb == "format") {
    pb::FormatReserveRequest req;
    req.set_name(p.values.at("--name"));
    if (ag) req.set_ag_bytes(*ag);
    if (domains) req.set_domains(*domains);
    req.set_force(force);
    pb::FormatReserveResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::FormatReserve, req, &r)) return fail(*f);
    if (g_json) {
      PrintJson({{"reserve", ToJson(r.reserve())}});
    } else {
      std::cout << "formatted reserve " << Esc(r.reserve().name()) << ": " << r.reserve().luns_size() << " LUNs, "
                << HumanBytes(r.reserve().capacity_bytes())
                << (r.reserve().domains() > 1 ? ", " + std::to_string(r.reserve().domains()) + " domains" : "") << "\n";
    }
    return kExitOk;
  }
  if (c.group == "reserve" && c.verb == "takeover") {
    pb::TakeoverReserveRequest req;
    req.set_force(force);
    pb::TakeoverReserveResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::TakeoverReserve, req, &r)) return fail(*f);
    if (g_json) {
      PrintJson({{"reserve", ToJson(r.reserve())}});
    } else {
      std::cout << "took over reserve " << r.reserve().name() << "\n";
      PrintReserve(r.reserve());
    }
    return kExitOk;
  }
  if (c.verb == "add-lun") {
    pb::AddLunRequest req;
    req.set_url(args[0]);
    req.set_force(force);
    pb::AddLunResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::AddLun, req, &r)) return fail(*f);
    if (g_json) {
      PrintJson({{"lun", ToJson(r.lun())}, {"reserve", ToJson(r.reserve())}});
    } else {
      std::cout << "added LUN " << r.lun().index() << " (" << Esc(r.lun().url()) << ", "
                << HumanBytes(r.lun().size_bytes()) << "); reserve capacity now "
                << HumanBytes(r.reserve().capacity_bytes()) << "\n";
    }
    return kExitOk;
  }
  if (c.group == "export") {
    // A change that committed while the Ganesha file could not be written:
    // the export stands (exit 0) and the next change or start writes the file.
    auto warn_publish = [](const std::string& what, const std::string& publish_error) {
      if (!publish_error.empty()) {
        std::cerr << "nasgw: warning: " << what << ", but nasgwd could not write the NFS-Ganesha exports file ("
                  << publish_error << "); the next export change or nasgwd start writes it\n";
      }
    };
    if (c.verb == "list") {
      pb::ListExportsResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::ListExports, pb::ListExportsRequest(), &r)) return fail(*f);
      if (g_json) {
        json exports = json::array();
        for (const auto& e : r.exports()) exports.push_back(ToJson(e));
        PrintJson({{"exports", exports}});
      } else {
        Table t({"ID", "PSEUDO", "VOLUME", "PATH", "ACCESS", "CLIENTS", "SQUASH", "SEC", "NFS"});
        for (const auto& e : r.exports()) {
          t.Add({std::to_string(e.id()), e.pseudo(), e.volume(), e.path(), e.read_only() ? "ro" : "rw",
                 e.clients().empty() ? "*" : JoinList(e.clients(), ","), e.root_squash() ? "root" : "none",
                 JoinList(e.sec(), ","), JoinList(e.protocols(), ",")});
        }
        t.Print({0});
      }
      return kExitOk;
    }
    if (c.verb == "show") {
      pb::GetExportResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::GetExport, get_export, &r)) return fail(*f);
      if (g_json) {
        PrintJson({{"export", ToJson(r.export_())}});
      } else {
        PrintExport(r.export_());
      }
      return kExitOk;
    }
    if (c.verb == "add") {
      pb::AddExportResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::AddExport, add_export, &r)) return fail(*f);
      if (g_json) {
        json j = {{"export", ToJson(r.export_())}};
        if (!r.publish_error().empty()) j["publish_error"] = r.publish_error();
        PrintJson(j);
      } else {
        PrintExport(r.export_());
      }
      warn_publish("export " + std::to_string(r.export_().id()) + " was added", r.publish_error());
      return kExitOk;
    }
    if (c.verb == "remove") {
      pb::RemoveExportRequest req;
      req.set_id(export_id);
      pb::RemoveExportResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::RemoveExport, req, &r)) return fail(*f);
      if (g_json) {
        json j = {{"removed", {{"export", ToJson(r.export_())}}}};
        if (!r.publish_error().empty()) j["publish_error"] = r.publish_error();
        PrintJson(j);
      } else {
        std::cout << "removed export " << r.export_().id() << " (" << Esc(r.export_().pseudo()) << ")\n";
      }
      warn_publish("export " + std::to_string(r.export_().id()) + " was removed", r.publish_error());
      return kExitOk;
    }
  }
  if (c.group == "share") {
    auto warn_publish = [](const std::string& what, const std::string& publish_error) {
      if (!publish_error.empty()) {
        std::cerr << "nasgw: warning: " << what << ", but nasgwd could not write the smb.conf shares file ("
                  << publish_error << "); the next share change or nasgwd start writes it\n";
      }
    };
    if (c.verb == "list") {
      pb::ListSharesResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::ListShares, pb::ListSharesRequest(), &r)) return fail(*f);
      if (g_json) {
        json shares = json::array();
        for (const auto& sh : r.shares()) shares.push_back(ToJson(sh));
        PrintJson({{"shares", shares}});
      } else {
        Table t({"NAME", "VOLUME", "PATH", "ACCESS", "USERS", "BROWSEABLE", "ENCRYPT"});
        for (const auto& sh : r.shares()) {
          t.Add({sh.name(), sh.volume(), sh.path(), sh.read_only() ? "ro" : "rw",
                 sh.valid_users().empty() ? "*" : JoinList(sh.valid_users(), ","), sh.browseable() ? "yes" : "no",
                 sh.encrypt() ? "yes" : "no"});
        }
        t.Print({});
      }
      return kExitOk;
    }
    if (c.verb == "show") {
      pb::GetShareRequest req;
      req.set_name(args[0]);
      pb::GetShareResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::GetShare, req, &r)) return fail(*f);
      if (g_json) {
        PrintJson({{"share", ToJson(r.share())}});
      } else {
        PrintShare(r.share());
      }
      return kExitOk;
    }
    if (c.verb == "add") {
      pb::AddShareResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::AddShare, add_share, &r)) return fail(*f);
      if (g_json) {
        json j = {{"share", ToJson(r.share())}};
        if (!r.publish_error().empty()) j["publish_error"] = r.publish_error();
        PrintJson(j);
      } else {
        PrintShare(r.share());
      }
      warn_publish("share " + r.share().name() + " was added", r.publish_error());
      return kExitOk;
    }
    if (c.verb == "remove") {
      pb::RemoveShareRequest req;
      req.set_name(args[0]);
      pb::RemoveShareResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::RemoveShare, req, &r)) return fail(*f);
      if (g_json) {
        json j = {{"removed", {{"share", ToJson(r.share())}}}};
        if (!r.publish_error().empty()) j["publish_error"] = r.publish_error();
        PrintJson(j);
      } else {
        std::cout << "removed share " << Esc(r.share().name()) << "\n";
      }
      warn_publish("share " + r.share().name() + " was removed", r.publish_error());
      return kExitOk;
    }
  }
  if (c.group == "snapshot" && c.verb == "schedule add") {
    pb::AddSnapshotScheduleResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::AddSnapshotSchedule, add_schedule, &r)) return fail(*f);
    if (g_json) {
      PrintJson({{"schedule", ToJson(r.schedule())}});
    } else {
      PrintSchedule(r.schedule());
    }
    return kExitOk;
  }
  if (c.group == "snapshot" && c.verb == "schedule list") {
    pb::ListSnapshotSchedulesRequest req;
    if (!args.empty()) req.set_volume(args[0]);
    pb::ListSnapshotSchedulesResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::ListSnapshotSchedules, req, &r)) return fail(*f);
    if (g_json) {
      json list = json::array();
      for (const auto& s : r.schedules()) list.push_back(ToJson(s));
      PrintJson({{"schedules", list}});
    } else {
      Table t({"VOLUME", "NAME", "EVERY", "KEEP", "LAST", "NEXT"});
      for (const auto& s : r.schedules()) {
        t.Add({s.volume(), s.name(), EveryText(s.every_seconds()), std::to_string(s.keep()),
               s.last_run_unix() == 0 ? "never" : UtcTime(s.last_run_unix()),
               s.next_run_unix() == 0 ? "now" : UtcTime(s.next_run_unix())});
      }
      t.Print({3});
    }
    return kExitOk;
  }
  if (c.group == "snapshot" && c.verb == "schedule remove") {
    pb::RemoveSnapshotScheduleRequest req;
    req.set_volume(args[0]);
    req.set_name(args[1]);
    pb::RemoveSnapshotScheduleResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::RemoveSnapshotSchedule, req, &r)) return fail(*f);
    if (g_json) {
      PrintJson({{"removed", {{"schedule", ToJson(r.schedule())}}}});
    } else {
      std::cout << "removed schedule " << Esc(r.schedule().name()) << " of volume " << Esc(r.schedule().volume())
                << " (the snapshots it took are kept)\n";
    }
    return kExitOk;
  }
  if (c.group == "snapshot") {
    if (c.verb == "list") {
      pb::ListSnapshotsRequest req;
      req.set_volume(args[0]);
      pb::ListSnapshotsResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::ListSnapshots, req, &r)) return fail(*f);
      if (g_json) {
        json snaps = json::array();
        for (const auto& sn : r.snapshots()) snaps.push_back(ToJson(sn));
        PrintJson({{"snapshots", snaps}});
      } else {
        Table t({"NAME", "ID", "CREATED", "TXG", "FREES"});
        for (const auto& sn : r.snapshots()) {
          t.Add({sn.name(), std::to_string(sn.id()), UtcTime(sn.created_unix()), std::to_string(sn.txg()),
                 HumanBytes(sn.frees_bytes())});
        }
        t.Print({1, 3, 4});
      }
      return kExitOk;
    }
    if (c.verb == "show" || c.verb == "create") {
      pb::Snapshot sn;
      if (c.verb == "show") {
        pb::GetSnapshotRequest req;
        req.set_volume(args[0]);
        req.set_name(args[1]);
        pb::GetSnapshotResponse r;
        if (auto f = client->Call(&pb::Admin::Stub::GetSnapshot, req, &r)) return fail(*f);
        sn = r.snapshot();
      } else {
        pb::CreateSnapshotRequest req;
        req.set_volume(args[0]);
        req.set_name(args[1]);
        pb::CreateSnapshotResponse r;
        if (auto f = client->Call(&pb::Admin::Stub::CreateSnapshot, req, &r)) return fail(*f);
        sn = r.snapshot();
      }
      if (g_json) {
        PrintJson({{"snapshot", ToJson(sn)}});
      } else {
        PrintSnapshot(sn);
      }
      return kExitOk;
    }
    if (c.verb == "rollback") {
      pb::RollbackSnapshotRequest req;
      req.set_volume(args[0]);
      req.set_name(args[1]);
      pb::RollbackSnapshotResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::RollbackSnapshot, req, &r)) return fail(*f);
      if (g_json) {
        PrintJson({{"rolled_back",
                    {{"snapshot", ToJson(r.snapshot())},
                     {"removed_keys", r.removed_keys()},
                     {"restored_keys", r.restored_keys()},
                     {"freed_bytes", r.freed_bytes()},
                     {"orphans", r.orphans()}}}});
      } else {
        std::cout << "volume " << Esc(r.snapshot().volume()) << " rolled back to snapshot " << Esc(r.snapshot().name())
                  << ": " << r.removed_keys() << " keys removed, " << r.restored_keys() << " restored, "
                  << HumanBytes(r.freed_bytes()) << " freed";
        if (r.orphans() != 0) std::cout << ", " << r.orphans() << " unlinked open files reclaimed";
        std::cout << "\n";
      }
      return kExitOk;
    }
    if (c.verb == "clone") {
      pb::CloneSnapshotRequest req;
      req.set_volume(args[0]);
      req.set_snapshot(args[1]);
      req.set_clone(args[2]);
      pb::CloneSnapshotResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::CloneSnapshot, req, &r)) return fail(*f);
      if (g_json) {
        PrintJson({{"volume", ToJson(r.volume())}});
      } else {
        std::cout << "volume " << Esc(r.volume().name()) << " cloned from " << Esc(args[0]) << "@" << Esc(args[1])
                  << " (" << r.volume().files() << " files, shares its data)\n";
      }
      return kExitOk;
    }
    if (c.verb == "delete") {
      pb::DeleteSnapshotRequest req;
      req.set_volume(args[0]);
      req.set_name(args[1]);
      pb::DeleteSnapshotResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::DeleteSnapshot, req, &r)) return fail(*f);
      if (g_json) {
        PrintJson({{"deleted", {{"snapshot", ToJson(r.snapshot())}}}});
      } else {
        std::cout << "deleted snapshot " << Esc(r.snapshot().name()) << " of volume " << Esc(r.snapshot().volume())
                  << ": gave back " << HumanBytes(r.snapshot().frees_bytes()) << " of data, "
                  << HumanBytes(r.snapshot().frees_meta_bytes()) << " of metadata\n";
      }
      return kExitOk;
    }
  }
  if (c.verb == "list") {
    pb::ListVolumesResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::ListVolumes, pb::ListVolumesRequest(), &r)) return fail(*f);
    if (g_json) {
      json vols = json::array();
      for (const auto& v : r.volumes()) vols.push_back(ToJson(v));
      PrintJson({{"volumes", vols}});
    } else {
      // A DOMAIN column once a volume is in another domain than 0 (a split reserve).
      const bool split = std::any_of(r.volumes().begin(), r.volumes().end(), [](const auto& v) { return v.domain(); });
      std::vector<std::string> head = {"NAME",      "ID",        "RECORD",        "FILES", "USED",
                                       "SNAPSHOTS", "SNAP-USED", "WRITE-THROUGH", "ORIGIN"};
      if (split) head.emplace_back("DOMAIN");
      Table t(head);
      for (const auto& v : r.volumes()) {
        std::vector<std::string> row = {v.name(),
                                        std::to_string(v.id()),
                                        HumanBytes(v.record_bytes()),
                                        std::to_string(v.files()),
                                        HumanBytes(v.bytes()),
                                        std::to_string(v.snapshots()),
                                        HumanBytes(v.snapshot_bytes()),
                                        v.write_through() ? "on" : "off",
                                        OriginText(v)};
        if (split) row.push_back(std::to_string(v.domain()));
        t.Add(row);
      }
      t.Print(split ? std::set<size_t>{1, 2, 3, 4, 5, 6, 7, 9} : std::set<size_t>{1, 2, 3, 4, 5, 6, 7});
    }
    return kExitOk;
  }
  if (c.verb == "show" || c.verb == "create" || c.verb == "set") {
    pb::Volume v;
    if (c.verb == "show") {
      pb::GetVolumeRequest req;
      req.set_name(args[0]);
      pb::GetVolumeResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::GetVolume, req, &r)) return fail(*f);
      v = r.volume();
    } else if (c.verb == "create") {
      pb::CreateVolumeRequest req;
      req.set_name(args[0]);
      if (rs) req.set_record_bytes(static_cast<uint32_t>(*rs));  // unset: the server's default
      if (domain) req.set_domain(*domain);                       // unset: the server picks
      pb::CreateVolumeResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::CreateVolume, req, &r)) return fail(*f);
      v = r.volume();
    } else {
      pb::UpdateVolumeRequest req;
      req.set_name(args[0]);
      if (rs) req.set_record_bytes(static_cast<uint32_t>(*rs));
      if (write_through) req.set_write_through(*write_through);
      if (atime) req.set_atime(*atime);
      pb::UpdateVolumeResponse r;
      if (auto f = client->Call(&pb::Admin::Stub::UpdateVolume, req, &r)) return fail(*f);
      v = r.volume();
    }
    if (g_json) {
      PrintJson({{"volume", ToJson(v)}});
    } else {
      PrintVolume(v);
    }
    return kExitOk;
  }
  if (c.verb == "delete") {
    pb::DeleteVolumeRequest req;
    req.set_name(args[0]);
    req.set_force(force);
    pb::DeleteVolumeResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::DeleteVolume, req, &r)) return fail(*f);
    if (g_json) {
      PrintJson({{"deleted", {{"volume", args[0]}}}});
    } else {
      std::cout << "deleted volume " << Esc(args[0]) << "\n";
    }
    return kExitOk;
  }
  if (c.group == "stats") {
    pb::GetStatsResponse r;
    if (auto f = client->Call(&pb::Admin::Stub::GetStats, pb::GetStatsRequest(), &r)) return fail(*f);
    if (g_json) {
      json luns = json::array();
      for (const auto& l : r.luns()) luns.push_back({{"index", l.index()}, {"url", l.url()}, {"io", ToJson(l.io())}});
      PrintJson({{"node", ToJson(r.node())}, {"luns", luns}, {"cache", ToJson(r.cache())}});
    } else {
      std::cout << "node " << Esc(r.node().name()) << ", up " << HumanDuration(r.node().uptime_seconds())
                << ", reserve " << StateName(r.node().reserve_state()) << "\n\n";
      Table t({"#", "URL", "R-OPS", "R-BYTES", "R-P50", "R-P99", "W-OPS", "W-BYTES", "W-P50", "W-P99", "ERRORS",
               "RETRIES", "TIMEOUTS"});
      for (const auto& l : r.luns()) {
        const auto& io = l.io();
        t.Add({std::to_string(l.index()), l.url(), HumanCount(io.read().ops()), HumanBytes(io.read().bytes()),
               HumanUs(io.read().latency_p50_us()), HumanUs(io.read().latency_p99_us()), HumanCount(io.write().ops()),
               HumanBytes(io.write().bytes()), HumanUs(io.write().latency_p50_us()),
               HumanUs(io.write().latency_p99_us()),
               std::to_string(io.read().errors() + io.write().errors() + io.other().errors()),
               std::to_string(io.retries()), std::to_string(io.timeouts())});
      }
      t.Print({0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
      const pb::CacheStats& cs = r.cache();
      auto pct = [](double v) { return v < 0 ? std::string("-") : std::to_string(std::lround(v)) + "%"; };
      char amp[32];
      std::snprintf(amp, sizeof amp, "%.2f", WriteAmplification(cs));
      std::cout << "\ncache: budget " << HumanBytes(cs.memory_budget_bytes()) << "\n"
                << "  dirty   " << HumanBytes(cs.dirty_bytes()) << " of " << HumanBytes(cs.dirty_limit_bytes())
                << " in " << cs.dirty_files() << " files; stalls " << cs.stalls() << ", timed out "
                << cs.stall_timeouts() << ", ENOSPC " << cs.no_space() << "\n"
                << "  writes  " << HumanBytes(cs.client_write_bytes())
                << " by clients: " << HumanCount(cs.writes_cached()) << " cached, " << HumanCount(cs.writes_logged())
                << " logged, " << HumanCount(cs.writes_stable()) << " in place (" << HumanCount(cs.writes_log_slow())
                << " as the log was slow); array writes " << HumanBytes(cs.array_write_bytes()) << " (" << amp
                << " per client byte)\n"
                << "  commits " << HumanCount(cs.commits_logged()) << " logged, " << HumanCount(cs.commits_flushed())
                << " flushed in place\n"
                << "  flushes " << HumanCount(cs.flushes()) << ", " << HumanBytes(cs.flush_bytes()) << ", mean "
                << HumanUs(cs.flushes() == 0 ? 0 : cs.flush_microseconds() / cs.flushes()) << "\n"
                << "  data    " << HumanBytes(cs.clean_bytes()) << " clean of " << HumanBytes(cs.clean_capacity_bytes())
                << "; hits " << pct(HitPct(cs.read_hit_bytes(), cs.read_miss_bytes())) << " of "
                << HumanBytes(cs.read_hit_bytes() + cs.read_miss_bytes()) << " read; read ahead "
                << HumanBytes(cs.read_ahead_bytes()) << "\n"
                << "  meta    " << HumanBytes(cs.meta_bytes()) << " of " << HumanBytes(cs.meta_capacity_bytes())
                << "; hits " << pct(HitPct(cs.meta_hits(), cs.meta_misses())) << " of "
                << HumanCount(cs.meta_hits() + cs.meta_misses()) << " block reads\n";
    }
    return kExitOk;
  }
  return Usage("unhandled command", "nasgw");
}

int Main(int argc, char** argv) {
  Parsed p;
  const std::string error = Parse(argc, argv, &p);
  const CommandSpec* c = Find(p.words);
  if (p.help) {
    if (c) {
      std::cout << c->usage;
    } else if (p.words.size() >= 2 && p.words[0] == "snapshot" && p.words[1] == "schedule") {
      std::cout << GroupHelp("snapshot", "schedule");
    } else if (!p.words.empty() &&
               (p.words[0] == "node" || p.words[0] == "reserve" || p.words[0] == "cluster" || p.words[0] == "volume" ||
                p.words[0] == "snapshot" || p.words[0] == "export" || p.words[0] == "share")) {
      std::cout << GroupHelp(p.words[0]);
    } else {
      std::cout << kMainHelp;
    }
    return kExitOk;
  }
  if (!error.empty() && !c) return Usage(error, "nasgw");
  if (p.words.empty()) {
    std::cerr << kMainHelp;
    return kExitUsage;
  }
  if (!c) {
    const std::string& g = p.words[0];
    if (g == "node" || g == "reserve" || g == "cluster" || g == "volume" || g == "snapshot" || g == "export" ||
        g == "share") {
      if (p.words.size() == 1) return Usage(g + " needs a command", "nasgw " + g);
      if (g == "snapshot" && p.words[1] == "schedule") {
        if (p.words.size() == 2) return Usage("snapshot schedule needs a command", "nasgw snapshot schedule");
        return Usage("unknown command 'snapshot schedule " + p.words[2] + "'", "nasgw snapshot schedule");
      }
      return Usage("unknown command '" + g + " " + p.words[1] + "'", "nasgw " + g);
    }
    return Usage("unknown command '" + g + "'", "nasgw");
  }
  const std::string hint = "nasgw " + c->group + (c->verb.empty() ? "" : " " + c->verb);
  if (!error.empty()) return Usage(error, hint);
  const size_t skip = 1 + VerbWords(*c);
  std::vector<std::string> args(p.words.begin() + static_cast<std::ptrdiff_t>(skip), p.words.end());
  if (args.size() < c->positionals) {
    const std::string what = c->group == "volume" ? "a volume NAME"
                             : c->group == "snapshot"
                                 ? (c->verb == "list" || c->verb == "schedule add" ? "a VOLUME"
                                    : c->verb == "schedule remove"                 ? "a VOLUME and a schedule NAME"
                                    : c->verb == "clone" ? "a VOLUME, a SNAPSHOT and a NEWVOLUME name"
                                                         : "a VOLUME and a snapshot NAME")
                             : c->group == "export" ? (c->verb == "add"    ? "VOLUME[/SUBPATH]"
                                                       : c->verb == "show" ? "an export ID or PSEUDO path"
                                                                           : "an export ID")
                                                    : "a URL";
    return Usage(hint + " needs " + what, hint);
  }
  if (args.size() > c->positionals + c->optional) {
    return Usage("unexpected argument '" + args[c->positionals + c->optional] + "'", hint);
  }
  for (const auto& [k, v] : p.values) {
    if (std::find(c->valued.begin(), c->valued.end(), k) == c->valued.end()) {
      return Usage("option " + k + " does not apply to " + hint, hint);
    }
  }
  for (const auto& f : p.flags) {
    if (std::find(c->flags.begin(), c->flags.end(), f) == c->flags.end()) {
      return Usage("option " + f + " does not apply to " + hint, hint);
    }
  }
  // What goes to nasgwd must be text: no control characters (they would act
  // on terminals and logs) and valid UTF-8 (a proto3 string cannot carry
  // anything else; the request would fail in the protobuf layer).
  auto text_problem = [&](const std::string& what, const std::string& value) -> std::optional<int> {
    const std::string problem = nasgw::TextProblem(value);
    if (problem.empty()) return std::nullopt;
    // A LUN URL may carry a CHAP secret: not repeated.
    const std::string shown = what == "LUN URL" ? "" : " '" + Esc(value) + "'";
    return Usage(what + shown + " holds " + problem + ": control characters and invalid UTF-8 are refused", hint);
  };
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    const std::string what = c->group == "volume"                                          ? "volume name"
                             : c->group == "snapshot" && i == 0                            ? "volume name"
                             : c->group == "snapshot" && c->verb == "clone" && i == 2      ? "volume name"
                             : c->group == "snapshot" && c->verb.rfind("schedule", 0) == 0 ? "schedule name"
                             : c->group == "snapshot"                                      ? "snapshot name"
                             : c->group == "export" && c->verb == "add"                    ? "VOLUME[/SUBPATH]"
                             : c->group == "export"                                        ? "export"
                             : c->group == "reserve" && c->verb == "add-lun"               ? "LUN URL"
                                                                                           : "argument";
    if (auto rc = text_problem(what, a)) return *rc;
  }
  for (const auto& [k, v] : p.values) {
    if (auto rc = text_problem(k, v)) return *rc;
  }
  return Run(*c, args, p);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    // Never a stack trace: one line.
    std::cerr << "nasgw: " << e.what() << "\n";
    return kExitFailed;
  }
}
