#include "fs/reserve.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/clock.h"
#include "base/log.h"
#include "base/mutex.h"

namespace nasgw::fs {

using block::BlockDevice;

namespace {

Result<LunLabel> ReadOne(BlockDevice& dev, uint64_t offset) {
  std::vector<uint8_t> buf(kLabelBytes);
  Status s = block::ReadSync(dev, offset / dev.info().block_size, buf.data(), buf.size());
  if (!s.ok()) return s;
  return DecodeLabel(buf);
}

Status WriteOne(BlockDevice& dev, uint64_t offset, const std::vector<uint8_t>& bytes) {
  return block::WriteSync(dev, offset / dev.info().block_size, bytes.data(), bytes.size(), /*fua=*/true);
}

std::string Describe(const LunLabel& l) {
  return "reserve '" + l.reserve_name + "' (" + l.reserve_uuid.ToString() + ")";
}

// The best label a LUN carries, or why it has none.
struct LunState {
  Reserve::Device dev;
  Result<LunLabel> best = Status::NotFound("not read");
  bool primary_ok = false;
  bool backup_ok = false;
};

Result<LunState> Inspect(const Reserve::Device& dev) {
  LunState st;
  st.dev = dev;
  auto copies = ReadLabels(*dev);
  if (!copies.ok()) return copies.status().WithContext("read labels of " + dev->info().name);
  const auto& p = copies->primary;
  const auto& b = copies->backup;
  st.primary_ok = p.ok();
  st.backup_ok = b.ok();
  if (p.ok() && b.ok()) {
    // Both readable: the newer wins (a crash between the two writes of
    // WriteLabels leaves the primary one generation ahead).
    st.best = b->generation > p->generation ? b : p;
    st.primary_ok = p.value() == st.best.value();
    st.backup_ok = b.value() == st.best.value();
  } else if (p.ok()) {
    st.best = p;
  } else if (b.ok()) {
    st.best = b;
  } else if (p.status().code() == Code::kNotFound && b.status().code() == Code::kNotFound) {
    st.best = Status::NotFound(dev->info().name + " carries no nasgw label (a blank or foreign LUN)");
  } else {
    st.best =
        Status::Corruption("both labels of " + dev->info().name + " are damaged (primary: " + p.status().ToString() +
                           "; backup: " + b.status().ToString() + ")");
  }
  return st;
}

uint64_t DataBytes(uint64_t lun_bytes) {
  const uint64_t overhead = kReserveHeaderBytes + kReserveTrailerBytes;
  return lun_bytes > overhead ? lun_bytes - overhead : 0;
}

// Refuses devices that cannot become members: too small, odd block size,
// already labelled (unless forced), or the same LUN twice.
Status CheckCandidates(const std::vector<Reserve::Device>& luns, uint64_t ag_bytes, bool force,
                       const std::set<std::string>& member_designators) {
  std::set<std::string> seen = member_designators;
  for (const auto& dev : luns) {
    if (dev == nullptr) return Status::InvalidArgument("null LUN");
    const auto& in = dev->info();
    if (in.block_size != 512 && in.block_size != 4096) {
      return Status::NotSupported(in.name + " has block size " + std::to_string(in.block_size) +
                                  "; nasgw uses 512 or 4096");
    }
    if (Reserve::AgCount(in.size_bytes(), ag_bytes) == 0) {
      return Status::InvalidArgument(in.name + " is too small: " + std::to_string(in.size_bytes()) +
                                     " bytes; a LUN needs at least " +
                                     std::to_string(kReserveHeaderBytes + kReserveTrailerBytes + ag_bytes) +
                                     " for its header, trailer and one allocation group");
    }
    if (in.size_bytes() / in.block_size > UINT64_MAX / 2) return Status::InvalidArgument(in.name + " is too large");
    if (!in.designator.empty() && !seen.insert(in.designator).second) {
      return Status::InvalidArgument(in.name + " is a LUN that is already in the list or the reserve (" +
                                     in.designator + ")");
    }
    if (in.designator.size() > kLabelTextMax) {
      return Status::NotSupported(in.name + " has a designator longer than " + std::to_string(kLabelTextMax));
    }
    auto st = Inspect(dev);
    if (!st.ok()) return st.status();
    if (st->best.ok() && !force) {
      return Status::Exists(in.name + " already belongs to " + Describe(st->best.value()) +
                            "; refusing to overwrite it (force overwrites)");
    }
  }
  return Status();
}

}  // namespace

Result<LabelCopies> ReadLabels(BlockDevice& dev) {
  if (dev.info().size_bytes() < 2 * kLabelBytes) return Status::InvalidArgument(dev.info().name + " is too small");
  LabelCopies c;
  c.primary = ReadOne(dev, PrimaryLabelOffset());
  if (!c.primary.ok() && c.primary.status().code() != Code::kNotFound &&
      c.primary.status().code() != Code::kCorruption && c.primary.status().code() != Code::kNotSupported) {
    return c.primary.status();  // an I/O error, not a verdict on the label
  }
  c.backup = ReadOne(dev, BackupLabelOffset(dev.info().size_bytes()));
  if (!c.backup.ok() && c.backup.status().code() != Code::kNotFound && c.backup.status().code() != Code::kCorruption &&
      c.backup.status().code() != Code::kNotSupported) {
    return c.backup.status();
  }
  return c;
}

Status WriteLabels(BlockDevice& dev, const LunLabel& label) {
  const auto bytes = EncodeLabel(label);
  NASGW_RETURN_IF_ERROR(WriteOne(dev, PrimaryLabelOffset(), bytes).WithContext("write primary label"));
  NASGW_RETURN_IF_ERROR(
      WriteOne(dev, BackupLabelOffset(label.lun_size_bytes), bytes).WithContext("write backup label"));
  return block::FlushSync(dev);
}

Reserve::Slice Reserve::AgSlice(uint32_t ag_count, uint32_t domain, uint32_t domains) {
  NASGW_ASSERT_LT(domain, domains);
  const auto bound = [&](uint32_t d) { return static_cast<uint32_t>(uint64_t{ag_count} * d / domains); };
  return {bound(domain), bound(domain + 1) - bound(domain)};
}

uint32_t Reserve::AgCount(uint64_t lun_bytes, uint64_t ag_bytes) {
  const uint64_t n = DataBytes(lun_bytes) / ag_bytes;
  return n > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(n);
}

Result<std::unique_ptr<Reserve>> Reserve::Format(const std::vector<Device>& luns, const ReserveOptions& o) {
  if (luns.empty()) return Status::InvalidArgument("a reserve needs at least one LUN");
  if (luns.size() > kReserveLunsMax) {
    return Status::InvalidArgument("a reserve holds at most " + std::to_string(kReserveLunsMax) + " LUNs");
  }
  if (o.name.empty() || o.name.size() > kLabelTextMax) {
    return Status::InvalidArgument("reserve name must be 1-" + std::to_string(kLabelTextMax) + " characters");
  }
  if (o.ag_bytes < kAgBytesMin || o.ag_bytes > kAgBytesMax || o.ag_bytes % kAgBytesMin != 0) {
    return Status::InvalidArgument("allocation group size must be a multiple of 1 MiB in [1 MiB, 64 GiB]");
  }
  if (o.domains < 1 || o.domains > kReserveDomainsMax) {
    return Status::InvalidArgument("a reserve holds 1 to " + std::to_string(kReserveDomainsMax) + " domains");
  }
  NASGW_RETURN_IF_ERROR(CheckCandidates(luns, o.ag_bytes, o.force, {}));
  // With several domains, each needs a LUN where its share is two groups
  // or more: Domain::Create gives the first group of its share of every LUN
  // to metadata, the rest to data (with one domain, Create says so).
  for (uint32_t d = 0; o.domains > 1 && d < o.domains; d++) {
    uint32_t widest = 0;
    for (const auto& lun : luns) {
      widest = std::max(widest, AgSlice(AgCount(lun->info().size_bytes(), o.ag_bytes), d, o.domains).count);
    }
    if (widest < 2) {
      return Status::InvalidArgument("these LUNs are too small for " + std::to_string(o.domains) +
                                     " domains of allocation groups of " + std::to_string(o.ag_bytes) +
                                     " bytes: domain " + std::to_string(d) + " would get at most " +
                                     std::to_string(widest) +
                                     " group of each LUN, and needs 2 of one, for its metadata and its data "
                                     "(smaller groups, larger LUNs, or fewer domains)");
    }
  }

  std::unique_ptr<Reserve> r(new Reserve);
  r->uuid_ = Uuid::Random();
  r->name_ = o.name;
  r->ag_bytes_ = o.ag_bytes;
  r->domains_ = o.domains;
  std::vector<LunMember> members;
  for (size_t i = 0; i < luns.size(); i++) {
    members.push_back({Uuid::Random(), luns[i]->info().size_bytes(), static_cast<uint32_t>(i)});
  }
  const uint64_t now = WallNanos();
  for (size_t i = 0; i < luns.size(); i++) {
    LunLabel l;
    l.reserve_uuid = r->uuid_;
    l.lun_uuid = members[i].lun_uuid;
    l.generation = 1;
    l.lun_index = static_cast<uint32_t>(i);
    l.lun_size_bytes = members[i].size_bytes;
    l.block_size = luns[i]->info().block_size;
    l.ag_bytes = o.ag_bytes;
    l.created_ns = now;
    l.designator = luns[i]->info().designator;
    l.reserve_name = o.name;
    l.domains = o.domains;
    l.members = members;
    NASGW_RETURN_IF_ERROR(WriteLabels(*luns[i], l).WithContext("format " + luns[i]->info().name));
    MutexLock lock(r->mu_);  // not shared yet: for the analysis
    r->members_.push_back({luns[i], l});
  }
  NASGW_LOG(kInfo, "fs") << "reserve formatted" << Kv("name", o.name) << Kv("uuid", r->uuid_.ToString())
                         << Kv("luns", luns.size()) << Kv("domains", o.domains)
                         << Kv("capacity_bytes", r->capacity_bytes());
  return r;
}

Result<std::unique_ptr<Reserve>> Reserve::Open(const std::vector<Device>& luns, bool read_only) {
  if (luns.empty()) return Status::InvalidArgument("no LUNs given");
  std::vector<LunState> states;
  for (const auto& dev : luns) {
    if (dev == nullptr) return Status::InvalidArgument("null LUN");
    auto st = Inspect(dev);
    if (!st.ok()) return st.status();
    if (!st->best.ok()) return st->best.status();
    states.push_back(std::move(st.value()));
  }
  // One reserve only.
  const LunLabel& first = states[0].best.value();
  for (const auto& st : states) {
    const LunLabel& l = st.best.value();
    if (l.reserve_uuid != first.reserve_uuid) {
      return Status::InvalidArgument("LUNs of two reserves given: " + states[0].dev->info().name + " belongs to " +
                                     Describe(first) + ", " + st.dev->info().name + " to " + Describe(l));
    }
  }
  // Each LUN once.
  std::map<Uuid, size_t> by_uuid;
  for (size_t i = 0; i < states.size(); i++) {
    auto [it, fresh] = by_uuid.emplace(states[i].best->lun_uuid, i);
    if (!fresh) {
      return Status::InvalidArgument(states[it->second].dev->info().name + " and " + states[i].dev->info().name +
                                     " carry the same LUN label (" + states[i].best->lun_uuid.ToString() +
                                     "): the same LUN given twice, or a copy of it");
    }
  }
  // The newest membership is the truth.
  const LunLabel* newest = &first;
  for (const auto& st : states) {
    if (st.best->generation > newest->generation) newest = &st.best.value();
  }
  const LunLabel truth = *newest;
  std::unique_ptr<Reserve> r(new Reserve);
  r->uuid_ = truth.reserve_uuid;
  r->name_ = truth.reserve_name;
  r->ag_bytes_ = truth.ag_bytes;
  if (r->ag_bytes_ < kAgBytesMin || r->ag_bytes_ > kAgBytesMax) {
    return Status::Corruption("label of " + Describe(truth) + " has an invalid allocation group size");
  }
  r->domains_ = truth.domains;
  // The split is fixed at format: a LUN that says otherwise is not one a
  // nasgw labelled for this reserve. Checked before any label is mended.
  for (const auto& st : states) {
    if (st.best->domains != truth.domains) {
      return Status::Corruption(st.dev->info().name + " says " + Describe(truth) + " has " +
                                std::to_string(st.best->domains) + " domains, its newest label " +
                                std::to_string(truth.domains));
    }
  }
  std::set<Uuid> members;
  for (const LunMember& m : truth.members) {
    members.insert(m.lun_uuid);
    auto it = by_uuid.find(m.lun_uuid);
    if (it == by_uuid.end()) {
      return Status::NotFound(Describe(truth) + " is missing LUN " + std::to_string(m.index) + " (" +
                              m.lun_uuid.ToString() + ", " + std::to_string(m.size_bytes) +
                              " bytes): give every LUN of the reserve");
    }
    LunState& st = states[it->second];
    const auto& in = st.dev->info();
    const LunLabel& own = st.best.value();
    if (in.size_bytes() < m.size_bytes) {
      return Status::Corruption(in.name + " is smaller (" + std::to_string(in.size_bytes()) +
                                " bytes) than when it joined " + Describe(truth) + " (" + std::to_string(m.size_bytes) +
                                " bytes)");
    }
    if (in.block_size != own.block_size) {
      return Status::Corruption(in.name + " now has block size " + std::to_string(in.block_size) + ", was " +
                                std::to_string(own.block_size));
    }
    if (!own.designator.empty() && !in.designator.empty() && own.designator != in.designator) {
      return Status::InvalidArgument(in.name + " carries the label of LUN " + std::to_string(m.index) + " of " +
                                     Describe(truth) + " but is another LUN (" + in.designator + ", labelled " +
                                     own.designator + "): a copy of a reserve LUN? refusing to open");
    }
    // Bring stale or damaged copies up to the truth.
    LunLabel want = own;
    want.generation = truth.generation;
    want.members = truth.members;
    want.reserve_name = truth.reserve_name;
    want.lun_index = m.index;
    if (!(want == own) || !st.primary_ok || !st.backup_ok) {
      std::string what =
          !(want == own) ? "generation " + std::to_string(own.generation) + " -> " + std::to_string(truth.generation)
                         : (!st.primary_ok ? "primary copy rewritten" : "backup copy rewritten");
      if (read_only) {
        r->repairs_.push_back(in.name + ": would repair: " + what);
      } else {
        NASGW_RETURN_IF_ERROR(WriteLabels(*st.dev, want).WithContext("repair label of " + in.name));
        r->repairs_.push_back(in.name + ": " + what);
        NASGW_LOG(kWarn, "fs") << "label repaired" << Kv("lun", in.name) << Kv("what", what);
      }
    }
    MutexLock lock(r->mu_);  // not shared yet: for the analysis
    r->members_.push_back({st.dev, want});
  }
  for (const auto& st : states) {
    if (!members.contains(st.best->lun_uuid)) {
      return Status::InvalidArgument(st.dev->info().name + " carries a label of " + Describe(truth) +
                                     " but is not a member of it (label generation " +
                                     std::to_string(st.best->generation) + ", reserve generation " +
                                     std::to_string(truth.generation) + "): a LUN that was removed?");
    }
  }
  return r;
}

Status Reserve::AddLun(const Device& lun, bool force) {
  MutexLock add(add_mu_);
  std::vector<Member> current;
  {
    MutexLock lock(mu_);
    current = members_;
  }
  if (current.size() >= kReserveLunsMax) {
    return Status::NoSpace("reserve '" + name_ + "' already has the most LUNs a reserve can hold (" +
                           std::to_string(kReserveLunsMax) + ")");
  }
  std::set<std::string> designators;
  for (const auto& m : current) {
    if (m.dev == lun) return Status::Exists(lun->info().name + " is already a member of reserve '" + name_ + "'");
    if (!m.dev->info().designator.empty()) designators.insert(m.dev->info().designator);
  }
  NASGW_RETURN_IF_ERROR(CheckCandidates({lun}, ag_bytes_, force, designators));

  const LunLabel& any = current[0].label;
  const uint64_t gen = any.generation + 1;
  std::vector<LunMember> members = any.members;
  LunLabel added;
  added.reserve_uuid = uuid_;
  added.lun_uuid = Uuid::Random();
  added.generation = gen;
  added.lun_index = static_cast<uint32_t>(members.size());
  added.lun_size_bytes = lun->info().size_bytes();
  added.block_size = lun->info().block_size;
  added.ag_bytes = ag_bytes_;
  added.created_ns = WallNanos();
  added.designator = lun->info().designator;
  added.reserve_name = name_;
  added.domains = domains_;
  members.push_back({added.lun_uuid, added.lun_size_bytes, added.lun_index});
  added.members = members;
  // 1. The new LUN first: until an old member says otherwise, it is not in.
  NASGW_RETURN_IF_ERROR(WriteLabels(*lun, added).WithContext("label new LUN " + lun->info().name));
  // 2. Every old member; the first of these writes commits the add.
  std::vector<Member> next;
  for (const auto& m : current) {
    LunLabel l = m.label;
    l.generation = gen;
    l.members = members;
    Status s = WriteLabels(*m.dev, l);
    if (!s.ok()) {
      // Labels are now of two generations; Open() settles on the newest.
      return s.WithContext("add " + lun->info().name + ": relabel " + m.dev->info().name +
                           " (the add completes when the reserve is next opened with every LUN)");
    }
    next.push_back({m.dev, l});
  }
  next.push_back({lun, added});
  {
    MutexLock lock(mu_);
    members_ = std::move(next);
  }
  NASGW_LOG(kInfo, "fs") << "LUN added" << Kv("reserve", name_) << Kv("lun", lun->info().name)
                         << Kv("index", added.lun_index) << Kv("capacity_bytes", capacity_bytes());
  return Status();
}

uint64_t Reserve::generation() const {
  MutexLock lock(mu_);
  return members_.front().label.generation;
}

size_t Reserve::lun_count() const {
  MutexLock lock(mu_);
  return members_.size();
}

Reserve::Device Reserve::lun(uint32_t index) const {
  MutexLock lock(mu_);
  NASGW_ASSERT_LT(index, members_.size());
  return members_[index].dev;
}

LunLabel Reserve::label(uint32_t index) const {
  MutexLock lock(mu_);
  NASGW_ASSERT_LT(index, members_.size());
  return members_[index].label;
}

uint32_t Reserve::ag_count(uint32_t index) const {
  MutexLock lock(mu_);
  NASGW_ASSERT_LT(index, members_.size());
  return AgCount(members_[index].label.lun_size_bytes, ag_bytes_);
}

uint64_t Reserve::capacity_bytes() const {
  MutexLock lock(mu_);
  uint64_t total = 0;
  for (const auto& m : members_) total += AgCount(m.label.lun_size_bytes, ag_bytes_) * ag_bytes_;
  return total;
}

}  // namespace nasgw::fs
