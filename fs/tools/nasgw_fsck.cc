// nasgw-fsck: checks a reserve and the domain on it, read-only.
//
//   nasgw-fsck --lun URL [--lun URL ...] [--initiator IQN]
//
// Exit codes: 0 clean; 1 problems found (one per line on stdout); 2 the
// reserve or domain could not be opened (the reason on stderr); 64 usage.
#include <cstdio>
#include <string>
#include <vector>

#include "block/iscsi_device.h"
#include "fs/domain.h"

int main(int argc, char** argv) {
  using namespace nasgw;
  std::vector<std::string> luns;
  std::string initiator;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--lun" && i + 1 < argc) {
      luns.push_back(argv[++i]);
    } else if (a == "--initiator" && i + 1 < argc) {
      initiator = argv[++i];
    } else {
      std::fprintf(stderr, "usage: nasgw-fsck --lun URL [--lun URL ...] [--initiator IQN]\n");
      return 64;
    }
  }
  if (luns.empty()) {
    std::fprintf(stderr, "usage: nasgw-fsck --lun URL [--lun URL ...] [--initiator IQN]\n");
    return 64;
  }
  auto devs = block::OpenLuns(luns, initiator);
  if (!devs.ok()) {
    std::fprintf(stderr, "nasgw-fsck: %s\n", devs.status().ToString().c_str());
    return 2;
  }
  auto r = fs::Reserve::Open(*devs);
  if (!r.ok()) {
    std::fprintf(stderr, "nasgw-fsck: reserve: %s\n", r.status().ToString().c_str());
    return 2;
  }
  std::shared_ptr<fs::Reserve> reserve = std::move(r.value());
  for (const auto& rep : reserve->repairs()) std::printf("label repaired: %s\n", rep.c_str());
  auto d = fs::Domain::Open(reserve, 0);
  if (!d.ok()) {
    std::fprintf(stderr, "nasgw-fsck: domain: %s\n", d.status().ToString().c_str());
    return 2;
  }
  auto problems = (*d)->Check();
  if (!problems.ok()) {
    std::fprintf(stderr, "nasgw-fsck: %s\n", problems.status().ToString().c_str());
    return 2;
  }
  for (const auto& p : *problems) std::printf("%s\n", p.c_str());
  fs::StatFs s = (*d)->Statfs();
  std::fprintf(stderr, "nasgw-fsck: reserve '%s' (%zu LUNs): %zu problems; %llu files, %llu of %llu bytes free\n",
               reserve->name().c_str(), reserve->lun_count(), problems->size(),
               static_cast<unsigned long long>(s.files), static_cast<unsigned long long>(s.free_bytes),
               static_cast<unsigned long long>(s.total_bytes));
  return problems->empty() ? 0 : 1;
}
