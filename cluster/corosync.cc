// The interconnect through Corosync: CPG for the group and its messages,
// votequorum for the quorum flag. One thread connects, dispatches and
// reconnects; Send may come from any thread.

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/log.h"
#include "cluster/interconnect.h"

#include <corosync/cpg.h>
#include <corosync/votequorum.h>
#include <sys/eventfd.h>

namespace nasgw::cluster {
namespace {

std::string CsError(cs_error_t e) {
  return "corosync error " + std::to_string(static_cast<int>(e));
}

class CorosyncInterconnect : public Interconnect {
 public:
  CorosyncInterconnect(std::string group, uint32_t retry_ms) : group_(std::move(group)), retry_ms_(retry_ms) {
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  ~CorosyncInterconnect() override {
    Stop();
    if (wake_ >= 0) close(wake_);
  }

  void Start(Handlers handlers) override {
    MutexLock lock(mu_);
    if (thread_.joinable()) return;
    handlers_ = std::move(handlers);
    stop_ = false;
    thread_ = std::thread([this] { Run(); });
  }

  Status Send(std::string_view msg) override {
    MutexLock lock(mu_);
    if (!connected_) return Status::Unavailable("interconnect down: " + reason_);
    iovec iov{const_cast<char*>(msg.data()), msg.size()};
    cs_error_t e = cpg_mcast_joined(cpg_, CPG_TYPE_AGREED, &iov, 1);
    if (e == CS_ERR_TRY_AGAIN) return Status::Busy("corosync flow control: try again");
    if (e != CS_OK) return Status::Unavailable("cpg_mcast_joined: " + CsError(e));
    return Status();
  }

  InterconnectStatus status() const override {
    InterconnectStatus s;
    votequorum_handle_t vq = 0;
    {
      MutexLock lock(mu_);
      s.connected = connected_;
      vq = connected_ ? vq_ : 0;
      s.local_node = local_node_;
    }
    // Asked now (votequorum settles after CPG's membership change is
    // delivered), and outside the lock: a request to a stuck corosync must
    // not hold up Send, the heartbeats' path.
    s.quorate = vq != 0 && Quorate(vq, s.local_node);
    MutexLock lock(mu_);
    s.local_node = local_node_;
    s.members = members_;
    s.reason = connected_ ? "" : reason_;
    s.membership_changes = changes_;
    return s;
  }

  void Stop() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    uint64_t one = 1;
    if (wake_ >= 0) (void)!write(wake_, &one, sizeof(one));
    if (thread_.joinable()) thread_.join();
    MutexLock lock(mu_);
    DisconnectLocked();
    handlers_ = {};
  }

  std::string Describe() const override { return "corosync cpg group '" + group_ + "'"; }

 private:
  static void OnDeliver(cpg_handle_t h, const cpg_name*, uint32_t nodeid, uint32_t pid, void* msg, size_t len) {
    void* ctx = nullptr;
    if (cpg_context_get(h, &ctx) != CS_OK || ctx == nullptr) return;
    auto* self = static_cast<CorosyncInterconnect*>(ctx);
    if (self->handlers_.deliver) self->handlers_.deliver({nodeid, pid}, {static_cast<const char*>(msg), len});
  }

  static void OnConfchg(cpg_handle_t h, const cpg_name*, const cpg_address* members, size_t n_members,
                        const cpg_address* left, size_t n_left, const cpg_address*, size_t) {
    void* ctx = nullptr;
    if (cpg_context_get(h, &ctx) != CS_OK || ctx == nullptr) return;
    auto* self = static_cast<CorosyncInterconnect*>(ctx);
    std::vector<Member> m, l;
    for (size_t i = 0; i < n_members; i++) m.push_back({members[i].nodeid, members[i].pid});
    for (size_t i = 0; i < n_left; i++) l.push_back({left[i].nodeid, left[i].pid});
    self->Membership(m, l);
  }

  static bool Quorate(votequorum_handle_t vq, uint32_t local) {
    if (vq == 0) return false;
    votequorum_info info{};
    return votequorum_getinfo(vq, local, &info) == CS_OK && (info.flags & VOTEQUORUM_INFO_QUORATE) != 0;
  }

  // From the dispatch thread only.
  void Membership(const std::vector<Member>& members, const std::vector<Member>& left) {
    {
      MutexLock lock(mu_);
      members_ = members;
      changes_++;
    }
    NASGW_LOG(kInfo, "cluster") << "interconnect membership" << Kv("members", members.size())
                                << Kv("left", left.size());
    if (handlers_.membership) handlers_.membership(members, left);
  }

  bool Connect() {
    cpg_model_v1_data_t model{};
    model.model = CPG_MODEL_V1;
    model.cpg_deliver_fn = &OnDeliver;
    model.cpg_confchg_fn = &OnConfchg;
    cpg_handle_t h = 0;
    cs_error_t e = cpg_model_initialize(&h, CPG_MODEL_V1, reinterpret_cast<cpg_model_data_t*>(&model), this);
    std::string why;
    if (e != CS_OK) {
      why = "cannot reach corosync (is it running?): " + CsError(e);
    } else {
      cpg_name name{};
      name.length = static_cast<uint32_t>(std::min(group_.size(), sizeof(name.value) - 1));
      std::memcpy(name.value, group_.data(), name.length);
      unsigned int local = 0;
      int fd = -1;
      if ((e = cpg_join(h, &name)) != CS_OK) {
        why = "cpg_join '" + group_ + "': " + CsError(e);
      } else if ((e = cpg_fd_get(h, &fd)) != CS_OK || (e = cpg_local_get(h, &local)) != CS_OK) {
        why = "cpg: " + CsError(e);
      } else {
        votequorum_handle_t vq = 0;
        if (votequorum_initialize(&vq, nullptr) != CS_OK) vq = 0;  // reported as not quorate
        MutexLock lock(mu_);
        cpg_ = h;
        vq_ = vq;
        fd_ = fd;
        local_node_ = local;
        connected_ = true;
        reason_.clear();
        NASGW_LOG(kInfo, "cluster") << "joined the interconnect" << Kv("group", group_) << Kv("node", local);
        return true;
      }
      cpg_finalize(h);
    }
    MutexLock lock(mu_);
    if (why != reason_) NASGW_LOG(kWarn, "cluster") << "interconnect not joined" << Kv("reason", why);
    reason_ = why;
    return false;
  }

  void DisconnectLocked() REQUIRES(mu_) {
    if (!connected_ && cpg_ == 0) return;
    if (cpg_ != 0) cpg_finalize(cpg_);
    if (vq_ != 0) votequorum_finalize(vq_);
    cpg_ = 0;
    vq_ = 0;
    fd_ = -1;
    connected_ = false;
  }

  void Run() {
    for (;;) {
      {
        MutexLock lock(mu_);
        if (stop_) return;
      }
      if (!Connect()) {
        pollfd p{wake_, POLLIN, 0};
        poll(&p, 1, static_cast<int>(retry_ms_));
        continue;
      }
      int fd;
      cpg_handle_t h;
      {
        MutexLock lock(mu_);
        fd = fd_;
        h = cpg_;
      }
      for (;;) {
        pollfd p[2] = {{fd, POLLIN, 0}, {wake_, POLLIN, 0}};
        poll(p, 2, 1000);
        {
          MutexLock lock(mu_);
          if (stop_) return;
        }
        if ((p[0].revents & (POLLIN | POLLERR | POLLHUP)) == 0) continue;
        cs_error_t e = cpg_dispatch(h, CS_DISPATCH_ALL);
        if (e == CS_OK || e == CS_ERR_TRY_AGAIN) continue;
        // corosync went away: every member we knew is gone as far as we can tell.
        std::vector<Member> gone;
        {
          MutexLock lock(mu_);
          gone = members_;
          members_.clear();
          reason_ = "lost corosync: " + CsError(e);
          DisconnectLocked();
          changes_++;
        }
        NASGW_LOG(kWarn, "cluster") << "interconnect lost" << Kv("error", CsError(e));
        if (handlers_.membership) handlers_.membership({}, gone);
        break;
      }
    }
  }

  const std::string group_;
  const uint32_t retry_ms_;
  int wake_ = -1;
  Handlers handlers_;  // set before the thread starts, cleared after it ends
  std::thread thread_;
  mutable Mutex mu_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool connected_ GUARDED_BY(mu_) = false;
  cpg_handle_t cpg_ GUARDED_BY(mu_) = 0;
  votequorum_handle_t vq_ GUARDED_BY(mu_) = 0;
  int fd_ GUARDED_BY(mu_) = -1;
  uint32_t local_node_ GUARDED_BY(mu_) = 0;
  std::vector<Member> members_ GUARDED_BY(mu_);
  std::string reason_ GUARDED_BY(mu_) = "not started";
  uint64_t changes_ GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<Interconnect> NewCorosyncInterconnect(std::string group, uint32_t retry_ms) {
  return std::make_unique<CorosyncInterconnect>(std::move(group), retry_ms);
}

}  // namespace nasgw::cluster
