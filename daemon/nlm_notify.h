#pragma once

// NLM (NFSv3 byte-range lock) reclaims after a takeover (docs/cluster.md,
// "NLM clients of a moved address").
//
// Ganesha's NLM asks the rpc.statd of its machine to monitor each client
// that takes a lock (SM_MON); statd keeps a record per client, named by
// the client's address, in its state directory's sm/. A pair's nodes send
// each other those names (cluster::Recovery's nlm_clients). When a node
// takes its partner's addresses (and its ganesha is in the grace period
// nasgwd starts for them), it sends each of the partner's NLM clients an
// SM_NOTIFY (NSM, RFC-less; the Open Group's XNFS, chapter 11) from each
// moved address, naming it: "this server rebooted". The client's statd
// matches the name (or the sender's address) to the server it locked on,
// and its lockd reclaims its locks there (NLM4 LOCK, reclaim = true),
// which ganesha grants only in its grace period.
//
// nfs-utils' sm-notify would send them, but it names the server by the
// reverse-DNS name of its -v address and stops when there is none; CTDB
// and ganesha carry their own senders for that reason, and so does nasgwd.
//
// Every call is bounded: at most cluster::kNlmClientsMax clients, a
// deadline for all of them, one UDP socket per moved address.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace nasgw::daemon {

// The clients statd_dir's rpc.statd monitors: the names of the regular
// files in statd_dir/sm (a symlink is not one), sorted, at most
// cluster::kNlmClientsMax (*truncated says more were found), each
// cluster::NlmClientOk. A missing directory is no clients.
Result<std::vector<std::string>> ListStatdClients(const std::string& statd_dir, bool* truncated = nullptr);

// The partner's NLM clients as a node keeps them between its restarts
// (<state_dir>/partner-nlm-clients, kPartnerNlmFile): a first line
// kPartnerNlmHeader, then one name a line. A node whose nasgwd restarted
// after its partner died still has them to notify. Decoding keeps the
// names that are cluster::NlmClientOk, at most cluster::kNlmClientsMax;
// a text without the header is refused.
constexpr char kPartnerNlmFile[] = "partner-nlm-clients";
constexpr char kPartnerNlmHeader[] = "nasgw partner NLM clients 1";
std::string EncodePartnerNlm(const std::vector<std::string>& names);
Result<std::vector<std::string>> DecodePartnerNlm(std::string_view text);

struct NlmNotifyResult {
  size_t notified = 0;     // (client, address) pairs whose statd answered the SM_NOTIFY
  size_t unreachable = 0;  // no answer from the client's portmapper or statd by the deadline
  size_t skipped = 0;      // clients whose name is not an IPv4 address (nasgwd resolves no names)
};

// Sends each client (a record's name: ganesha gives statd the client's
// address) an SM_NOTIFY from each address of `from` (IPv4, host order;
// each must be on this machine), naming that address (dotted quad) with
// NSM state `state` (odd: "up"). The client's statd is found through its
// portmapper (UDP `pmap_port`). Retransmits with a doubling interval
// (0.5 s to 4 s) until every pair is answered or `timeout_ms` has passed,
// or `*stop` (when given) is set: it is looked at every 100 ms.
NlmNotifyResult NotifyNlmClients(const std::vector<std::string>& clients, const std::vector<uint32_t>& from,
                                 uint32_t state, uint32_t timeout_ms, uint16_t pmap_port = 111,
                                 const std::atomic<bool>* stop = nullptr);

// An NSM state number for this boot of the service: odd, and different from
// the last one a client was told (it comes from the clock, in seconds).
uint32_t NsmStateNow();

// ONC RPC over UDP (RFC 5531), the calls the sender makes; exposed for
// the tests.
namespace rpc {
constexpr uint32_t kPmapProg = 100000, kPmapVers = 2, kPmapGetport = 3;
constexpr uint32_t kNsmProg = 100024, kNsmVers = 1, kNsmNotify = 6;
constexpr uint32_t kIpprotoUdp = 17;
// A CALL with AUTH_NULL credentials and verifier, then `args` (XDR).
std::string Call(uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc, std::string_view args);
std::string GetportArgs(uint32_t prog, uint32_t vers, uint32_t prot);
std::string NotifyArgs(std::string_view mon_name, uint32_t state);
// A REPLY's xid and, when it is MSG_ACCEPTED with SUCCESS, its results;
// nullopt for anything else (a call, a denial, a damaged message).
struct Reply {
  uint32_t xid = 0;
  bool success = false;
  std::string results;
};
std::optional<Reply> ParseReply(std::string_view bytes);
// A CALL's xid, program, version, procedure and arguments (for a test's
// peer); nullopt for anything else.
struct CallMsg {
  uint32_t xid = 0, prog = 0, vers = 0, proc = 0;
  std::string args;
};
std::optional<CallMsg> ParseCall(std::string_view bytes);
// An accepted, successful REPLY carrying `results`.
std::string SuccessReply(uint32_t xid, std::string_view results);
}  // namespace rpc

}  // namespace nasgw::daemon
