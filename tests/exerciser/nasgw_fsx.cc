// nasgw-fsx: a model-checking file-system exerciser (in the spirit of fsx and
// RocksDB's db_map_fuzzer). Seeded random namespace and data operations are
// applied both to a directory (a mounted volume) and to a simple in-memory
// model; every result, error and byte read is compared after each step, the
// whole tree is compared every few hundred steps, and again after the file
// system is remounted (by running --remount-cmd) every --remount-every ops.
//
//   nasgw-fsx --dir DIR --seed N --ops N [--remount-every N --remount-cmd CMD] [--max-file BYTES]
//
// Prints the failing step and its seed on the first mismatch and exits 1.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

struct Node {
  enum Kind { kFile, kDir, kLink } kind = kFile;
  std::string data;    // file content, or symlink target
  mode_t mode = 0644;
  std::map<std::string, std::string> xattrs;
};
using NodeRef = std::shared_ptr<Node>;

struct Fail {
  std::string what;
};

class Fsx {
 public:
  Fsx(std::string root, uint64_t seed, size_t max_file) : root_(std::move(root)), rng_(seed), seed_(seed), max_file_(max_file) {
    paths_[""] = std::make_shared<Node>();
    paths_[""]->kind = Node::kDir;
  }

  void Step(uint64_t n) {
    step_ = n;
    switch (rng_() % 20) {
      case 0: case 1: Create(); break;
      case 2: Mkdir(); break;
      case 3: case 4: case 5: Write(); break;
      case 6: Truncate(); break;
      case 7: case 8: Read(); break;
      case 9: Rename(); break;
      case 10: Link(); break;
      case 11: Unlink(); break;
      case 12: Rmdir(); break;
      case 13: Symlink(); break;
      case 14: Chmod(); break;
      case 15: Xattr(); break;
      case 16: Stat(); break;
      case 17: OpenUnlinked(); break;
      default: Write(); break;
    }
  }

  void CheckTree() {
    // Every model path exists with its type and content; nothing else does.
    std::set<std::string> seen;
    Walk("", &seen);
    for (const auto& [p, n] : paths_) {
      if (!seen.count(p)) throw Fail{"'" + p + "' missing from the file system"};
    }
  }

  uint64_t ops_ok = 0, ops_err = 0;

 private:
  std::string Full(const std::string& p) const { return p.empty() ? root_ : root_ + "/" + p; }

  std::vector<std::string> Of(Node::Kind k) const {
    std::vector<std::string> v;
    for (const auto& [p, n] : paths_) {
      if (n->kind == k) v.push_back(p);
    }
    return v;
  }
  std::string Pick(const std::vector<std::string>& v) { return v[rng_() % v.size()]; }
  std::string NewName(const std::string& dir) {
    std::string n = "n" + std::to_string(rng_() % 40);
    return dir.empty() ? n : dir + "/" + n;
  }
  static std::string Parent(const std::string& p) {
    auto s = p.rfind('/');
    return s == std::string::npos ? "" : p.substr(0, s);
  }

  // Compares an outcome with the model's expectation.
  void Expect(const char* op, const std::string& path, int got_errno, int want_errno) {
    if (got_errno != want_errno) {
      throw Fail{std::string(op) + " '" + path + "': errno " + std::to_string(got_errno) + " (" +
                 std::strerror(got_errno) + "), model expects " + std::to_string(want_errno) + " (" +
                 std::strerror(want_errno) + ")"};
    }
    (want_errno ? ops_err : ops_ok)++;
  }
  static int Err(int rc) { return rc < 0 ? errno : 0; }

  bool Exists(const std::string& p) const { return paths_.count(p) != 0; }

  void Create() {
    std::string p = NewName(Pick(Of(Node::kDir)));
    int fd = open(Full(p).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    Expect("create", p, Err(fd), Exists(p) ? EEXIST : 0);
    if (fd >= 0) {
      close(fd);
      paths_[p] = std::make_shared<Node>();
    }
  }

  void Mkdir() {
    std::string p = NewName(Pick(Of(Node::kDir)));
    if (std::count(p.begin(), p.end(), '/') > 5) return;
    int rc = mkdir(Full(p).c_str(), 0755);
    Expect("mkdir", p, Err(rc), Exists(p) ? EEXIST : 0);
    if (rc == 0) {
      auto n = std::make_shared<Node>();
      n->kind = Node::kDir;
      n->mode = 0755;
      paths_[p] = n;
    }
  }

  void Write() {
    auto files = Of(Node::kFile);
    if (files.empty()) return Create();
    std::string p = Pick(files);
    NodeRef n = paths_[p];
    size_t off = rng_() % max_file_;
    size_t len = 1 + rng_() % std::min<size_t>(max_file_ - off, rng_() % 2 ? 4096 : 65536);
    std::string buf(len, 0);
    for (auto& c : buf) c = static_cast<char>(rng_());
    int fd = open(Full(p).c_str(), O_WRONLY);
    Expect("open", p, Err(fd), 0);
    ssize_t w = pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(off));
    int e = Err(static_cast<int>(w));
    if (rng_() % 8 == 0) fsync(fd);
    close(fd);
    Expect("write", p, e, 0);
    if (static_cast<size_t>(w) != len) throw Fail{"short write to '" + p + "'"};
    if (n->data.size() < off + len) n->data.resize(off + len, '\0');
    n->data.replace(off, len, buf);
    CheckContent(p, n);
  }

  void Truncate() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    size_t size = rng_() % max_file_;
    Expect("truncate", p, Err(truncate(Full(p).c_str(), static_cast<off_t>(size))), 0);
    paths_[p]->data.resize(size, '\0');
    CheckContent(p, paths_[p]);
  }

  void Read() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    CheckContent(p, paths_[p]);
  }

  void CheckContent(const std::string& p, const NodeRef& n) {
    struct stat st;
    Expect("stat", p, Err(stat(Full(p).c_str(), &st)), 0);
    if (static_cast<size_t>(st.st_size) != n->data.size()) {
      throw Fail{"'" + p + "' size " + std::to_string(st.st_size) + ", model " + std::to_string(n->data.size())};
    }
    int fd = open(Full(p).c_str(), O_RDONLY);
    Expect("open", p, Err(fd), 0);
    std::string got(n->data.size() + 10, 'Z');
    size_t at = 0;
    while (at < got.size()) {
      ssize_t r = pread(fd, got.data() + at, got.size() - at, static_cast<off_t>(at));
      if (r <= 0) break;
      at += static_cast<size_t>(r);
    }
    close(fd);
    got.resize(at);
    if (got != n->data) {
      size_t i = 0;
      while (i < got.size() && i < n->data.size() && got[i] == n->data[i]) i++;
      throw Fail{"'" + p + "' content differs at byte " + std::to_string(i) + " (read " + std::to_string(got.size()) +
                 " bytes, model " + std::to_string(n->data.size()) + ")"};
    }
  }

  void Rename() {
    if (paths_.size() < 2) return;
    std::vector<std::string> all;
    for (const auto& [p, n] : paths_) {
      if (!p.empty()) all.push_back(p);
    }
    if (all.empty()) return;
    std::string from = Pick(all);
    std::string to = rng_() % 3 == 0 && all.size() > 1 ? Pick(all) : NewName(Pick(Of(Node::kDir)));
    NodeRef src = paths_[from];
    int want = 0;
    auto tgt = paths_.find(to);
    const bool into_self = to == from || to.rfind(from + "/", 0) == 0;
    if (src->kind == Node::kDir && to != from && to.rfind(from + "/", 0) == 0) {
      want = EINVAL;  // into its own subtree
    } else if (from.rfind(to + "/", 0) == 0) {
      want = ENOTEMPTY;  // onto one of its ancestors (Linux checks this first)
    } else if (tgt != paths_.end() && to != from) {
      if (tgt->second == src) {
        want = 0;  // two names of one file: POSIX says nothing happens
      } else if (src->kind == Node::kDir && tgt->second->kind != Node::kDir) {
        want = ENOTDIR;
      } else if (src->kind != Node::kDir && tgt->second->kind == Node::kDir) {
        want = EISDIR;
      } else if (tgt->second->kind == Node::kDir && HasChildren(to)) {
        want = ENOTEMPTY;
      }
    }
    (void)into_self;
    int rc = rename(Full(from).c_str(), Full(to).c_str());
    Expect("rename", from + " -> " + to, Err(rc), want);
    if (rc != 0 || to == from) return;
    if (tgt != paths_.end() && tgt->second == src) return;
    // Move the subtree.
    std::map<std::string, NodeRef> moved;
    for (auto it = paths_.begin(); it != paths_.end();) {
      if (it->first == from || it->first.rfind(from + "/", 0) == 0) {
        moved[to + it->first.substr(from.size())] = it->second;
        it = paths_.erase(it);
      } else {
        ++it;
      }
    }
    paths_.erase(to);
    for (auto& [p, n] : moved) paths_[p] = n;
  }

  bool HasChildren(const std::string& dir) const {
    auto it = paths_.upper_bound(dir + "/");
    return it != paths_.end() && it->first.rfind(dir + "/", 0) == 0;
  }

  void Link() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string from = Pick(files);
    std::string to = NewName(Pick(Of(Node::kDir)));
    int rc = link(Full(from).c_str(), Full(to).c_str());
    Expect("link", from + " -> " + to, Err(rc), Exists(to) ? EEXIST : 0);
    if (rc == 0) {
      paths_[to] = paths_[from];
      Nlink(to);
    }
  }

  void Nlink(const std::string& p) {
    struct stat st;
    Expect("stat", p, Err(lstat(Full(p).c_str(), &st)), 0);
    size_t links = 0;
    for (const auto& [q, n] : paths_) links += n == paths_[p];
    if (st.st_nlink != links) {
      throw Fail{"'" + p + "' nlink " + std::to_string(st.st_nlink) + ", model " + std::to_string(links)};
    }
  }

  void Unlink() {
    std::vector<std::string> v = Of(Node::kFile);
    auto links = Of(Node::kLink);
    v.insert(v.end(), links.begin(), links.end());
    if (v.empty()) return;
    std::string p = Pick(v);
    Expect("unlink", p, Err(unlink(Full(p).c_str())), 0);
    paths_.erase(p);
  }

  void Rmdir() {
    auto dirs = Of(Node::kDir);
    dirs.erase(std::remove(dirs.begin(), dirs.end(), ""), dirs.end());
    if (dirs.empty()) return;
    std::string p = Pick(dirs);
    int rc = rmdir(Full(p).c_str());
    Expect("rmdir", p, Err(rc), HasChildren(p) ? ENOTEMPTY : 0);
    if (rc == 0) paths_.erase(p);
  }

  void Symlink() {
    std::string p = NewName(Pick(Of(Node::kDir)));
    std::string target = "target-" + std::to_string(rng_() % 1000);
    int rc = symlink(target.c_str(), Full(p).c_str());
    Expect("symlink", p, Err(rc), Exists(p) ? EEXIST : 0);
    if (rc == 0) {
      auto n = std::make_shared<Node>();
      n->kind = Node::kLink;
      n->data = target;
      paths_[p] = n;
    }
  }

  void Chmod() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    mode_t m = 0600 | (rng_() % 0100);
    Expect("chmod", p, Err(chmod(Full(p).c_str(), m)), 0);
    paths_[p]->mode = m;
    struct stat st;
    stat(Full(p).c_str(), &st);
    if ((st.st_mode & 07777) != m) throw Fail{"'" + p + "' mode differs after chmod"};
  }

  void Xattr() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    NodeRef n = paths_[p];
    std::string name = "user.k" + std::to_string(rng_() % 4);
    if (rng_() % 3 == 0) {
      int rc = removexattr(Full(p).c_str(), name.c_str());
      Expect("removexattr", p, Err(rc), n->xattrs.count(name) ? 0 : ENODATA);
      n->xattrs.erase(name);
    } else {
      std::string v(rng_() % 300, static_cast<char>('a' + rng_() % 26));
      Expect("setxattr", p, Err(setxattr(Full(p).c_str(), name.c_str(), v.data(), v.size(), 0)), 0);
      n->xattrs[name] = v;
    }
    for (const auto& [k, v] : n->xattrs) {
      std::string got(70000, 0);
      ssize_t len = getxattr(Full(p).c_str(), k.c_str(), got.data(), got.size());
      Expect("getxattr", p, Err(static_cast<int>(len)), 0);
      got.resize(static_cast<size_t>(len));
      if (got != v) throw Fail{"'" + p + "' xattr " + k + " differs"};
    }
  }

  void Stat() {
    std::vector<std::string> all;
    for (const auto& [p, n] : paths_) all.push_back(p);
    std::string p = Pick(all);
    struct stat st;
    Expect("lstat", p, Err(lstat(Full(p).c_str(), &st)), 0);
    const NodeRef& n = paths_[p];
    const bool type_ok = (n->kind == Node::kFile && S_ISREG(st.st_mode)) || (n->kind == Node::kDir && S_ISDIR(st.st_mode)) ||
                         (n->kind == Node::kLink && S_ISLNK(st.st_mode));
    if (!type_ok) throw Fail{"'" + p + "' has the wrong type"};
    if (n->kind == Node::kLink) {
      char buf[4096];
      ssize_t len = readlink(Full(p).c_str(), buf, sizeof(buf));
      if (len < 0 || std::string(buf, static_cast<size_t>(len)) != n->data) throw Fail{"'" + p + "' readlink differs"};
    }
    if (n->kind == Node::kFile) Nlink(p);
  }

  // Unlink a file while it is open: its data stays reachable through the
  // descriptor until close.
  void OpenUnlinked() {
    auto files = Of(Node::kFile);
    if (files.empty()) return;
    std::string p = Pick(files);
    NodeRef n = paths_[p];
    size_t links = 0;
    for (const auto& [q, m] : paths_) links += m == n;
    int fd = open(Full(p).c_str(), O_RDWR);
    Expect("open", p, Err(fd), 0);
    Expect("unlink", p, Err(unlink(Full(p).c_str())), 0);
    paths_.erase(p);
    std::string more = "after-unlink";
    ssize_t w = pwrite(fd, more.data(), more.size(), 0);
    Expect("write-unlinked", p, Err(static_cast<int>(w)), 0);
    if (n->data.size() < more.size()) n->data.resize(more.size(), '\0');
    n->data.replace(0, more.size(), more);
    std::string got(n->data.size(), 0);
    ssize_t r = pread(fd, got.data(), got.size(), 0);
    close(fd);
    if (r != static_cast<ssize_t>(got.size()) || got != n->data) throw Fail{"'" + p + "' unreadable after unlink"};
    (void)links;  // other names, if any, keep the data (checked by the tree walk)
  }

  void Walk(const std::string& dir, std::set<std::string>* seen) {
    DIR* d = opendir(Full(dir).c_str());
    if (d == nullptr) throw Fail{"cannot open directory '" + dir + "'"};
    seen->insert(dir);
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      names.push_back(name);
    }
    closedir(d);
    std::set<std::string> unique(names.begin(), names.end());
    if (unique.size() != names.size()) throw Fail{"directory '" + dir + "' lists a name twice"};
    for (const auto& name : names) {
      std::string p = dir.empty() ? name : dir + "/" + name;
      auto it = paths_.find(p);
      if (it == paths_.end()) throw Fail{"'" + p + "' exists but the model has no such path"};
      seen->insert(p);
      if (it->second->kind == Node::kDir) {
        Walk(p, seen);
      } else if (it->second->kind == Node::kFile) {
        CheckContent(p, it->second);
      }
    }
  }

  std::string root_;
  std::mt19937_64 rng_;
  uint64_t seed_;
  size_t max_file_;
  uint64_t step_ = 0;
  std::map<std::string, NodeRef> paths_;  // "" is the root
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir, remount_cmd;
  uint64_t seed = 1, ops = 10000, remount_every = 0, check_every = 500;
  size_t max_file = 300 << 10;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dir") dir = next();
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--ops") ops = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--remount-every") remount_every = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--remount-cmd") remount_cmd = next();
    else if (a == "--check-every") check_every = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--max-file") max_file = std::strtoull(next().c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "usage: nasgw-fsx --dir DIR --seed N --ops N [--remount-every N --remount-cmd CMD]\n");
      return 2;
    }
  }
  if (dir.empty() || (remount_every && remount_cmd.empty())) {
    std::fprintf(stderr, "nasgw-fsx: --dir is required; --remount-every needs --remount-cmd\n");
    return 2;
  }
  Fsx fsx(dir, seed, max_file);
  uint64_t remounts = 0;
  try {
    for (uint64_t n = 1; n <= ops; n++) {
      fsx.Step(n);
      if (check_every && n % check_every == 0) fsx.CheckTree();
      if (remount_every && n % remount_every == 0) {
        if (std::system(remount_cmd.c_str()) != 0) {
          std::fprintf(stderr, "nasgw-fsx: remount command failed at step %llu\n", static_cast<unsigned long long>(n));
          return 1;
        }
        remounts++;
        fsx.CheckTree();
      }
    }
    fsx.CheckTree();
  } catch (const Fail& f) {
    std::fprintf(stderr, "nasgw-fsx: seed %llu: MISMATCH: %s\n", static_cast<unsigned long long>(seed), f.what.c_str());
    return 1;
  }
  std::printf("nasgw-fsx: seed %llu: %llu operations (%llu ok, %llu expected errors), %llu remounts: model and file system agree\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(ops),
              static_cast<unsigned long long>(fsx.ops_ok), static_cast<unsigned long long>(fsx.ops_err),
              static_cast<unsigned long long>(remounts));
  return 0;
}
