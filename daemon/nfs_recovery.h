#pragma once

// NFSv4 reclaims after a takeover (docs/cluster.md, "NFSv4 clients of a
// moved address").
//
// Ganesha's fs recovery backend keeps a record per NFSv4 client that holds
// state, as a file under RecoveryRoot/v4recov (a long name split into
// directories): after a restart those clients, and only those, may reclaim
// their opens and locks in its grace period. A pair's nodes send each other
// their ganesha's records (cluster::Recovery), and each keeps its partner's
// under RecoveryRoot/<kPartnerRecoveryKey>/v4recov. When a node takes its
// partner's addresses it asks its own ganesha, over DBus, for a grace
// period of a "take IP" event naming that key: ganesha reads those records
// into its reclaim list and the partner's clients reclaim their state here.
//
// Every call is bounded: at most cluster::kRecoveryEntriesMax records, and
// the DBus call times out.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace nasgw::daemon {

// The "address" of ganesha's take-IP grace event that names the partner's
// records (RecoveryRoot/<this>/v4recov).
constexpr char kPartnerRecoveryKey[] = "nasgw-partner";

// This node's ganesha's records: under root/v4recov/node0 when ganesha
// runs clustered (its default; node 0 unless an FSAL sets another), else
// under root/v4recov. Relative paths, sorted, a directory's with a trailing
// '/'. At most cluster::kRecoveryEntriesMax (*truncated says more were
// found). A missing directory is no records.
Result<std::vector<std::string>> ListRecovery(const std::string& root, bool* truncated = nullptr);

// The partner's records this node keeps (WritePartnerRecovery's), listed
// as ListRecovery lists its own.
Result<std::vector<std::string>> ListPartnerRecovery(const std::string& root);

// The clients in a list of records (ListRecovery's): ganesha's record of a
// client is a directory named by it (a long name split into nested ones),
// holding files of its revoked handles; a client is a directory with none
// below it.
size_t CountRecoveryClients(const std::vector<std::string>& entries);

// Makes root/<kPartnerRecoveryKey>/v4recov hold exactly `entries` (paths as
// ListRecovery's, each checked by cluster::RecoveryPathOk): creates what is
// missing (empty files, as ganesha's records are), removes what is not
// listed.
Status WritePartnerRecovery(const std::string& root, const std::vector<std::string>& entries);

// Asks ganesha, on the DBus bus at `dbus_address` ("" for the system bus),
// to start a grace period in which the partner's clients reclaim
// (org.ganesha.nfsd.admin.grace, "5:<kPartnerRecoveryKey>"). Runs
// dbus-send, waiting at most `timeout_ms`.
Status StartTakeoverGrace(const std::string& dbus_address, uint32_t timeout_ms);

}  // namespace nasgw::daemon
