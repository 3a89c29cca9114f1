#pragma once

// The interconnect as nasgwd sees it: a group of nasgwd processes, one per
// node, that can multicast small control messages to each other and is told
// who joined and who left. In production it is Corosync's CPG (closed
// process groups) over knet, with quorum from votequorum
// (NewCorosyncInterconnect); in unit tests a MemHub whose links a test cuts.
//
// Delivery is in one total order to every member, including the sender
// (CPG's AGREED guarantee); a member that leaves (its process died, its
// node fell off the ring, the link was cut) is reported in `left` by every
// member that remains.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace nasgw::cluster {

// One nasgwd in the group: the ring's node id and the process id there.
struct Member {
  uint32_t node = 0;
  uint32_t pid = 0;
  bool operator==(const Member&) const = default;
};

struct InterconnectStatus {
  bool connected = false;  // joined the group
  bool quorate = false;    // votequorum's answer (a MemHub member: always, once joined)
  uint32_t local_node = 0;
  std::vector<Member> members;  // as of the last membership change
  std::string reason;           // why not connected
  uint64_t membership_changes = 0;
};

class Interconnect {
 public:
  struct Handlers {
    // A message from `from` (our own messages come back too).
    std::function<void(const Member& from, std::string_view msg)> deliver;
    // The group now has `members`; `left` went since the last call.
    std::function<void(const std::vector<Member>& members, const std::vector<Member>& left)> membership;
  };
  virtual ~Interconnect() = default;
  // Starts joining in the background (again after every loss, every
  // `retry_ms`); handlers are called from the interconnect's own thread,
  // never after Stop returns.
  virtual void Start(Handlers handlers) = 0;
  // Multicasts `msg` to the group. Unavailable while not joined; never blocks
  // for long (flow control answers Busy).
  virtual Status Send(std::string_view msg) = 0;
  virtual InterconnectStatus status() const = 0;
  virtual void Stop() = 0;
  // For logs and status: "corosync cpg group 'nasgw'".
  virtual std::string Describe() const = 0;
};

// Corosync: joins CPG group `group` through the local corosync (its IPC
// socket); reconnects every `retry_ms` while corosync is not running.
std::unique_ptr<Interconnect> NewCorosyncInterconnect(std::string group, uint32_t retry_ms);

// An in-memory group for tests: members made by one hub see each other;
// Cut(a, b) partitions two nodes (each is told the other left), Heal joins
// them again.
class MemHub : public std::enable_shared_from_this<MemHub> {
 public:
  static std::shared_ptr<MemHub> Make();
  std::unique_ptr<Interconnect> NewMember(uint32_t node);
  void Cut(uint32_t a, uint32_t b);
  void Heal(uint32_t a, uint32_t b);

 private:
  friend class MemMember;
  MemHub() = default;
  struct Slot;
  void Join(Slot* s);
  void Leave(Slot* s);
  Status Send(Slot* from, std::string_view msg);
  bool LinkedLocked(uint32_t a, uint32_t b) const REQUIRES(mu_);
  std::vector<Member> MembersOfLocked(uint32_t node) const REQUIRES(mu_);
  void AnnounceLocked(uint32_t node, const std::vector<Member>& left) REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<Slot*> slots_ GUARDED_BY(mu_);
  std::vector<std::pair<uint32_t, uint32_t>> cuts_ GUARDED_BY(mu_);
};

}  // namespace nasgw::cluster
