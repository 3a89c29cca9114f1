#include "cluster/interconnect.h"

#include <unistd.h>

#include <algorithm>

namespace nasgw::cluster {

// A MemHub member's place in its hub. Handlers run under the hub's lock, in
// the sender's thread: a test handler must not Send from inside one.
struct MemHub::Slot {
  uint32_t node = 0;
  uint32_t pid = 0;
  bool joined = false;
  Interconnect::Handlers handlers;
  uint64_t changes = 0;
  std::vector<Member> members;
};

class MemMember : public Interconnect {
 public:
  MemMember(std::shared_ptr<MemHub> hub, uint32_t node) : hub_(std::move(hub)) {
    slot_.node = node;
    slot_.pid = static_cast<uint32_t>(getpid());
  }
  ~MemMember() override { Stop(); }
  void Start(Handlers handlers) override {
    {
      MutexLock lock(hub_->mu_);
      slot_.handlers = std::move(handlers);
    }
    hub_->Join(&slot_);
  }
  Status Send(std::string_view msg) override { return hub_->Send(&slot_, msg); }
  InterconnectStatus status() const override {
    MutexLock lock(hub_->mu_);
    InterconnectStatus s;
    s.connected = slot_.joined;
    s.quorate = slot_.joined;
    s.local_node = slot_.node;
    s.members = slot_.members;
    s.membership_changes = slot_.changes;
    if (!slot_.joined) s.reason = "not joined";
    return s;
  }
  void Stop() override { hub_->Leave(&slot_); }
  std::string Describe() const override { return "in-memory group, node " + std::to_string(slot_.node); }

 private:
  std::shared_ptr<MemHub> hub_;
  MemHub::Slot slot_;
};

std::shared_ptr<MemHub> MemHub::Make() {
  return std::shared_ptr<MemHub>(new MemHub());
}

std::unique_ptr<Interconnect> MemHub::NewMember(uint32_t node) {
  return std::make_unique<MemMember>(shared_from_this(), node);
}

bool MemHub::LinkedLocked(uint32_t a, uint32_t b) const {
  if (a == b) return true;
  return std::none_of(cuts_.begin(), cuts_.end(), [&](const auto& c) {
    return (c.first == a && c.second == b) || (c.first == b && c.second == a);
  });
}

std::vector<Member> MemHub::MembersOfLocked(uint32_t node) const {
  std::vector<Member> m;
  for (const Slot* s : slots_) {
    if (s->joined && LinkedLocked(node, s->node)) m.push_back({s->node, s->pid});
  }
  return m;
}

void MemHub::AnnounceLocked(uint32_t node, const std::vector<Member>& left) {
  for (Slot* s : slots_) {
    if (!s->joined || s->node != node) continue;
    s->members = MembersOfLocked(node);
    s->changes++;
    if (s->handlers.membership) s->handlers.membership(s->members, left);
  }
}

void MemHub::Join(Slot* s) {
  MutexLock lock(mu_);
  if (s->joined) return;
  s->joined = true;
  slots_.push_back(s);
  std::vector<uint32_t> nodes;
  for (const Slot* o : slots_) {
    if (o->joined && LinkedLocked(s->node, o->node)) nodes.push_back(o->node);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (uint32_t n : nodes) AnnounceLocked(n, {});
}

void MemHub::Leave(Slot* s) {
  MutexLock lock(mu_);
  if (!s->joined) return;
  s->joined = false;
  slots_.erase(std::remove(slots_.begin(), slots_.end(), s), slots_.end());
  s->handlers = {};
  std::vector<uint32_t> nodes;
  for (const Slot* o : slots_) {
    if (LinkedLocked(s->node, o->node)) nodes.push_back(o->node);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (uint32_t n : nodes) AnnounceLocked(n, {{s->node, s->pid}});
}

Status MemHub::Send(Slot* from, std::string_view msg) {
  MutexLock lock(mu_);
  if (!from->joined) return Status::Unavailable("not joined to the group");
  for (Slot* s : slots_) {
    if (LinkedLocked(from->node, s->node) && s->handlers.deliver) s->handlers.deliver({from->node, from->pid}, msg);
  }
  return Status();
}

void MemHub::Cut(uint32_t a, uint32_t b) {
  MutexLock lock(mu_);
  if (!LinkedLocked(a, b)) return;
  cuts_.push_back({a, b});
  std::vector<Member> left_a, left_b;  // what each side loses
  for (const Slot* s : slots_) {
    if (s->node == b) left_a.push_back({s->node, s->pid});
    if (s->node == a) left_b.push_back({s->node, s->pid});
  }
  AnnounceLocked(a, left_a);
  AnnounceLocked(b, left_b);
}

void MemHub::Heal(uint32_t a, uint32_t b) {
  MutexLock lock(mu_);
  auto it = std::remove_if(cuts_.begin(), cuts_.end(), [&](const auto& c) {
    return (c.first == a && c.second == b) || (c.first == b && c.second == a);
  });
  if (it == cuts_.end()) return;
  cuts_.erase(it, cuts_.end());
  AnnounceLocked(a, {});
  AnnounceLocked(b, {});
}

}  // namespace nasgw::cluster
