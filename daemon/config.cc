// nasgwd's configuration loader: TOML text -> validated Config.
//
// Every problem found is collected (not only the first), each as
// "section.key: what is wrong", and returned as one InvalidArgument:
// "<origin>: head.workers: 0 is out of range 1..256; reserve.luns: required ...".
// toml++ is used without exceptions (see below); the public functions also
// catch what the standard library may throw (allocation), so nothing escapes.
#include "daemon/config.h"

#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <map>
#include <string_view>

#include "base/limits.h"
#include "block/iscsi_url.h"
#include "cluster/vip.h"
#include "fs/label.h"
#include "fs/ownership.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/un.h>

// Syntax errors come back as values (toml::parse_result), never as throws.
// toml++ puts this choice in its ABI namespace, so other files may include it
// with exceptions on.
#define TOML_EXCEPTIONS 0
// toml++ 3.3 states parser preconditions as assertions that malformed input
// breaks ("[\rx]", "[[[1]]]": marzer/tomlplusplus#301) before it reports a
// proper parse error. Such an assertion aborts a Debug build and becomes an
// optimiser assumption (UB) in a clang NDEBUG build; a config file is
// untrusted input, so both are off here. TOML_ASSERT_ASSUME is defined
// unconditionally by toml++'s preprocessor header: include that first (it is
// #pragma once) and redefine it before the rest of toml++ expands it.
#define TOML_ASSERT(expr) static_assert(true)
#include <toml++/impl/preprocessor.h>
#undef TOML_ASSERT_ASSUME
#define TOML_ASSERT_ASSUME(expr) static_assert(true)
#include <toml++/toml.h>

namespace nasgw::daemon {
namespace {

// A reserve holds at most as many LUNs as its label has member slots.
constexpr size_t kLunsMax = fs::kReserveLunsMax;
// A DNS label, so the node name can appear in host names and IQNs.
constexpr size_t kNodeNameMax = 63;
// RFC 3720 3.2.6.1: an iSCSI name is at most 223 bytes.
constexpr size_t kIscsiNameMax = 223;
// RFC 3720 8.2.1: CHAP secrets of at least 12 bytes (many targets refuse
// shorter ones); 16 is what common targets (tgtd, LIO, arrays) accept at most.
constexpr size_t kChapSecretMin = 12;
constexpr size_t kChapSecretMax = 16;
// libiscsi keeps the CHAP user in a 255-byte buffer.
constexpr size_t kChapUserMax = 255;
// sun_path holds the path and its terminating NUL.
constexpr size_t kUnixSocketPathMax = sizeof(sockaddr_un::sun_path) - 1;
constexpr uint32_t kSocketModeMin = 0600;
constexpr uint32_t kSocketModeMax = 0777;
// The config file and a secret file are small; bound what we read.
constexpr size_t kConfigBytesMax = 1 << 20;
constexpr size_t kSecretFileBytesMax = 4096;
// Past this many problems the message says how many more there are.
constexpr size_t kErrorsShownMax = 10;

constexpr std::string_view kDefaultInitiatorPrefix = "iqn.2026-11.org.nasgw:";
constexpr std::string_view kSections[] = {"node",    "reserve",  "head", "cache", "admin",
                                          "metrics", "shutdown", "nfs",  "smb",   "cluster"};

// Text from the file as it may appear in a message: control characters as '?'.
std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return out;
}

std::string Quote(std::string_view s) {
  return "'" + Printable(s) + "'";
}

std::string Octal(uint64_t v) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + (v & 7)));
    v >>= 3;
  } while (v != 0);
  return "0" + s;
}

bool HasControlChar(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view Describe(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string Range(int64_t lo, int64_t hi) {
  return std::to_string(lo) + ".." + std::to_string(hi);
}

class Errors {
 public:
  void Add(std::string_view field, std::string_view what) {
    list_.push_back(std::string(field) + ": " + std::string(what));
  }
  bool empty() const { return list_.empty(); }
  size_t size() const { return list_.size(); }

  Status ToStatus(const std::string& origin) const {
    std::string m = origin + ": " + list_[0];
    for (size_t i = 1; i < list_.size() && i < kErrorsShownMax; ++i) m += "; " + list_[i];
    if (list_.size() > kErrorsShownMax) m += "; and " + std::to_string(list_.size() - kErrorsShownMax) + " more";
    return Status::InvalidArgument(std::move(m));
  }

 private:
  std::vector<std::string> list_;
};

// One [section] of the file. Refuses keys it does not know on construction;
// the accessors leave the output untouched when the key is absent, so Config's
// defaults stand.
class Section {
 public:
  Section(std::string_view name, const toml::table* table, std::initializer_list<std::string_view> keys, Errors* errors)
      : name_(name), table_(table), errors_(errors) {
    if (table_ == nullptr) return;
    for (auto&& [key, value] : *table_) {
      if (std::find(keys.begin(), keys.end(), key.str()) != keys.end()) continue;
      std::string known;
      for (std::string_view k : keys) known += (known.empty() ? "" : ", ") + std::string(k);
      errors_->Add(Field(Printable(key.str())), "unknown key (known: " + known + ")");
    }
  }

  std::string Field(std::string_view key) const { return name_ + "." + std::string(key); }
  bool Has(std::string_view key) const { return Node(key) != nullptr; }
  const toml::node* Node(std::string_view key) const { return table_ ? table_->get(key) : nullptr; }

  // True when the key is present and a string without control characters.
  bool String(std::string_view key, std::string* out) const {
    const toml::node* n = Node(key);
    if (n == nullptr) return false;
    const auto* s = n->as_string();
    if (s == nullptr) {
      errors_->Add(Field(key), "expected a string, got " + std::string(Describe(*n)));
      return false;
    }
    if (HasControlChar(s->get())) {
      errors_->Add(Field(key), "contains a control character");
      return false;
    }
    *out = s->get();
    return true;
  }

  // True when the key is present and a boolean.
  bool Bool(std::string_view key, bool* out) const {
    const toml::node* n = Node(key);
    if (n == nullptr) return false;
    const auto* b = n->as_boolean();
    if (b == nullptr) {
      errors_->Add(Field(key), "expected true or false, got " + std::string(Describe(*n)));
      return false;
    }
    *out = b->get();
    return true;
  }

  // True when the key is present and an integer in lo..hi.
  bool Integer(std::string_view key, int64_t lo, int64_t hi, uint32_t* out) const {
    const toml::node* n = Node(key);
    if (n == nullptr) return false;
    const auto* i = n->as_integer();
    if (i == nullptr) {
      errors_->Add(Field(key), "expected an integer, got " + std::string(Describe(*n)));
      return false;
    }
    const int64_t v = i->get();
    if (v < lo || v > hi) {
      errors_->Add(Field(key), std::to_string(v) + " is out of range " + Range(lo, hi));
      return false;
    }
    *out = static_cast<uint32_t>(v);
    return true;
  }

 private:
  std::string name_;
  const toml::table* table_;
  Errors* errors_;
};

// An absolute path, without trailing slashes. False (and an error) otherwise.
bool CheckAbsolutePath(std::string_view field, std::string* path, Errors* errors) {
  if (path->empty() || path->front() != '/') {
    errors->Add(field, "must be an absolute path, got " + Quote(*path));
    return false;
  }
  while (path->size() > 1 && path->back() == '/') path->pop_back();
  return true;
}

void CheckSocketPath(std::string_view field, const std::string& path, std::string_view derived_from, Errors* errors) {
  if (path.size() <= kUnixSocketPathMax) return;
  std::string m = Quote(path) + " is " + std::to_string(path.size()) + " bytes long, out of range 1.." +
                  std::to_string(kUnixSocketPathMax) + " for a Unix socket path";
  if (!derived_from.empty()) m += " (derived from " + std::string(derived_from) + ")";
  errors->Add(field, m);
}

bool IsIpv4(const std::string& s) {
  in_addr a;
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}

bool IsIpv6(const std::string& s) {
  in6_addr a;
  return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

// RFC 1123 host name: dot-separated labels of 1..63 [A-Za-z0-9-], no label
// starting or ending with '-', at most 253 bytes.
bool IsDnsName(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// "host:port" where host is an IPv4 address, a bracketed IPv6 address or a
// host name, and port is 1..65535. Returns what is wrong, empty when fine.
// `ip_only`: the metrics endpoint binds an address literal (no resolver).
std::string CheckHostPort(std::string_view s, bool ip_only = false) {
  std::string host;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) return Quote(s) + ": unterminated '[' (expected [IPv6]:port)";
    host = std::string(s.substr(1, close - 1));
    std::string_view rest = s.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return Quote(s) + ": missing :port after the ']'";
    port = rest.substr(1);
    if (!IsIpv6(host)) return Quote(host) + " is not an IPv6 address";
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) return Quote(s) + ": missing :port (expected host:port)";
    host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return Quote(s) + ": an IPv6 address goes in brackets, like [2001:db8::1]:port";
    }
    if (host.empty()) return Quote(s) + ": missing host (0.0.0.0 or [::] means every address)";
    if (host.find_first_not_of("0123456789.") == std::string::npos) {
      if (!IsIpv4(host)) return Quote(host) + " is not an IPv4 address";
    } else if (ip_only) {
      return Quote(host) + " is not an IP address (this endpoint takes an IPv4 address or a bracketed IPv6 address)";
    } else if (!IsDnsName(host)) {
      return Quote(host) + " is not a host name, an IPv4 address or a bracketed IPv6 address";
    }
  }
  if (port.empty()) return Quote(s) + ": missing port after ':'";
  if (port.find_first_not_of("0123456789") != std::string_view::npos) return "port " + Quote(port) + " is not a number";
  uint64_t p = 0;
  for (char ch : port.substr(0, 9)) p = p * 10 + static_cast<uint64_t>(ch - '0');
  if (port.size() > 9 || p < 1 || p > 65535) return "port " + std::string(port) + " is out of range 1..65535";
  return {};
}

// Opens `path` read-only (never blocking on a FIFO) and checks it is a
// regular file. Returns the fd, or -1 with *why set.
int OpenRegularFile(const std::string& path, std::string* why, struct stat* st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    *why = "cannot open " + Quote(path) + ": " + std::strerror(errno);
    return -1;
  }
  if (::fstat(fd, st) != 0) {
    *why = "cannot stat " + Quote(path) + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    *why = Quote(path) + " is not a regular file";
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads at most max_bytes; more is an error.
bool ReadAll(int fd, const std::string& path, size_t max_bytes, std::string* out, std::string* why) {
  out->clear();
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = "cannot read " + Quote(path) + ": " + std::strerror(errno);
      return false;
    }
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > max_bytes) {
      *why = Quote(path) + " is larger than " + std::to_string(max_bytes) + " bytes";
      return false;
    }
  }
}

// A file the daemon will read later (TLS material): exists, regular, readable
// by us now, not empty.
// A file holding a secret (the CHAP secret, the TLS private key) must be
// its owner's alone: false (and an error) when group or others may access it.
bool CheckPrivateMode(std::string_view field, const std::string& path, const struct stat& st, std::string_view what,
                      Errors* errors) {
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) == 0) return true;
  errors->Add(field, Quote(path) + " is accessible to group or others (mode " + Octal(st.st_mode & 07777) + "); " +
                         std::string(what) + " must be mode 0600 or 0400");
  return false;
}

// With `private_what`, the file must also be its owner's alone
// (CheckPrivateMode).
void CheckReadableFile(std::string_view field, const std::string& path, Errors* errors,
                       std::string_view private_what = {}) {
  std::string why;
  struct stat st;
  int fd = OpenRegularFile(path, &why, &st);
  if (fd < 0) {
    errors->Add(field, why);
    return;
  }
  if (!private_what.empty() && !CheckPrivateMode(field, path, st, private_what, errors)) {
    ::close(fd);
    return;
  }
  char c;
  ssize_t n;
  do {
    n = ::read(fd, &c, 1);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    errors->Add(field, "cannot read " + Quote(path) + ": " + std::strerror(errno));
  } else if (n == 0) {
    errors->Add(field, Quote(path) + " is empty");
  }
  ::close(fd);
}

// The CHAP secret's own rules, wherever it came from. `where` says where it
// was read (for the file), never what it is: secrets are not echoed.
void CheckChapSecret(std::string_view field, const std::string& secret, std::string_view where, Errors* errors) {
  if (secret.size() < kChapSecretMin || secret.size() > kChapSecretMax) {
    const std::string size = std::to_string(secret.size()) + " bytes";
    errors->Add(field, (where.empty() ? size + " is" : std::string(where) + "is " + size + ",") + " out of range " +
                           Range(kChapSecretMin, kChapSecretMax) + " (RFC 3720 CHAP secret)");
  } else if (HasControlChar(secret)) {
    errors->Add(field, std::string(where) + "contains a control character");
  } else if (secret.find('/') != std::string::npos) {
    errors->Add(field, std::string(where) + "contains '/', which cannot be carried in an iSCSI URL");
  }
}

void ReadChapSecretFile(std::string_view field, const std::string& path, std::string* secret, Errors* errors) {
  std::string why;
  struct stat st;
  int fd = OpenRegularFile(path, &why, &st);
  if (fd < 0) {
    errors->Add(field, why);
    return;
  }
  if (!CheckPrivateMode(field, path, st, "a secret file", errors)) {
    ::close(fd);
    return;
  }
  std::string text;
  bool ok = ReadAll(fd, path, kSecretFileBytesMax, &text, &why);
  ::close(fd);
  if (!ok) {
    errors->Add(field, why);
    return;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t before = errors->size();
  CheckChapSecret(field, text, "the secret in " + Quote(path) + " ", errors);
  if (errors->size() == before) *secret = std::move(text);
}

bool GroupExists(const std::string& name) {
  long hint = ::sysconf(_SC_GETGR_R_SIZE_MAX);
  std::vector<char> buf(hint > 0 ? static_cast<size_t>(hint) : 16384);
  while (true) {
    group gr;
    group* result = nullptr;
    int rc = ::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &result);
    if (rc == ERANGE && buf.size() < (1u << 20)) {
      buf.resize(buf.size() * 2);
      continue;
    }
    return rc == 0 && result != nullptr;
  }
}

// Two URLs name the same LUN when host (case-insensitive, addresses in
// canonical form), port, target (iSCSI names are case-insensitive, RFC 3722)
// and LUN agree.
std::string LunKey(const block::IscsiUrl& u) {
  std::string host = Lower(u.host);
  char buf[INET6_ADDRSTRLEN];
  in6_addr a6;
  in_addr a4;
  if ((inet_pton(AF_INET6, host.c_str(), &a6) == 1 && inet_ntop(AF_INET6, &a6, buf, sizeof(buf)) != nullptr) ||
      (inet_pton(AF_INET, host.c_str(), &a4) == 1 && inet_ntop(AF_INET, &a4, buf, sizeof(buf)) != nullptr)) {
    host = buf;
  }
  return host + "\n" + std::to_string(u.port) + "\n" + Lower(u.target) + "\n" + std::to_string(u.lun);
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// ---- the sections -----------------------------------------------------------

void ParseNode(const Section& s, Config* c, Errors* errors) {
  if (s.String("name", &c->node_name)) {
    const std::string& n = c->node_name;
    if (n.empty() || n.size() > kNodeNameMax) {
      errors->Add("node.name",
                  std::to_string(n.size()) + " characters is out of range 1.." + std::to_string(kNodeNameMax));
    } else if (n.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
               std::string::npos) {
      errors->Add("node.name", Quote(n) + " may only contain the characters [A-Za-z0-9._-]");
    } else if (n == "." || n == "..") {
      errors->Add("node.name", Quote(n) + " is not a usable name");
    }
  } else if (!s.Has("name")) {
    errors->Add("node.name", "required (1..63 characters of [A-Za-z0-9._-], unique in the cluster)");
  }
  if (s.String("run_dir", &c->run_dir)) CheckAbsolutePath("node.run_dir", &c->run_dir, errors);
  if (s.String("state_dir", &c->state_dir)) CheckAbsolutePath("node.state_dir", &c->state_dir, errors);
  if (s.String("log_level", &c->log_level)) {
    const std::string& l = c->log_level;
    if (l != "debug" && l != "info" && l != "warn" && l != "error") {
      errors->Add("node.log_level", Quote(l) + " is not one of debug, info, warn, error");
    }
  }
}

void ParseLuns(const Section& s, Config* c, Errors* errors) {
  const toml::node* n = s.Node("luns");
  if (n == nullptr) {
    errors->Add("reserve.luns",
                "required (1.." + std::to_string(kLunsMax) + " iSCSI URLs, iscsi://host[:port]/target-iqn/lun)");
    return;
  }
  const toml::array* arr = n->as_array();
  if (arr == nullptr) {
    errors->Add("reserve.luns", "expected an array of iSCSI URLs, got " + std::string(Describe(*n)));
    return;
  }
  if (arr->empty() || arr->size() > kLunsMax) {
    errors->Add("reserve.luns", std::to_string(arr->size()) + " URLs is out of range " + Range(1, kLunsMax));
    return;
  }
  std::map<std::string, size_t> seen;  // LunKey -> index
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string field = "reserve.luns[" + std::to_string(i) + "]";
    const toml::node& e = *arr->get(i);
    const auto* str = e.as_string();
    if (str == nullptr) {
      errors->Add(field, "expected a string, got " + std::string(Describe(e)));
      continue;
    }
    const std::string& url = str->get();
    if (HasControlChar(url)) {
      errors->Add(field, "contains a control character");
      continue;
    }
    auto parsed = block::ParseIscsiUrl(url);
    if (!parsed.ok()) {
      errors->Add(field, parsed.status().message());
      continue;
    }
    if (!parsed->user.empty()) {
      // ToString() masks the password: the message goes to logs.
      errors->Add(field, parsed->ToString() +
                             " carries CHAP credentials; URLs in the file must not: put them in reserve.chap_user "
                             "and reserve.chap_secret (or reserve.chap_secret_file)");
      continue;
    }
    auto [it, inserted] = seen.emplace(LunKey(*parsed), i);
    if (!inserted) {
      errors->Add(field, Quote(url) + " is the same LUN as reserve.luns[" + std::to_string(it->second) + "]");
      continue;
    }
    c->luns.push_back(url);
  }
}

void ParseReserve(const Section& s, Config* c, Errors* errors) {
  ParseLuns(s, c, errors);

  if (s.String("initiator", &c->initiator) && !c->initiator.empty()) {
    const std::string& i = c->initiator;
    if (!StartsWith(i, "iqn.") && !StartsWith(i, "eui.") && !StartsWith(i, "naa.")) {
      errors->Add("reserve.initiator", Quote(i) + " must start with iqn., eui. or naa. (an iSCSI name, RFC 3720)");
    } else if (i.size() > kIscsiNameMax) {
      errors->Add("reserve.initiator", std::to_string(i.size()) + " bytes is out of range 5.." +
                                           std::to_string(kIscsiNameMax) + " (RFC 3720 iSCSI name)");
    } else if (i.find(' ') != std::string::npos) {
      errors->Add("reserve.initiator", Quote(i) + " contains a space");
    }
  }

  // CHAP: a user and exactly one source of the secret, or none of them.
  std::string secret_file;
  const bool user_given = s.String("chap_user", &c->chap_user) ? !c->chap_user.empty() : s.Has("chap_user");
  if (!c->chap_user.empty()) {
    if (c->chap_user.size() > kChapUserMax) {
      errors->Add("reserve.chap_user",
                  std::to_string(c->chap_user.size()) + " bytes is out of range 1.." + std::to_string(kChapUserMax));
    } else if (c->chap_user.find_first_of("%@/") != std::string::npos) {
      errors->Add("reserve.chap_user", Quote(c->chap_user) +
                                           " contains '%', '@' or '/', which cannot be carried in "
                                           "an iSCSI URL");
    }
  }
  // Present but unusable (wrong type) still counts as given, so the error is
  // about the value, not about a missing secret.
  const bool inline_given = s.String("chap_secret", &c->chap_secret) ? !c->chap_secret.empty() : s.Has("chap_secret");
  const bool file_given = s.String("chap_secret_file", &secret_file) ? !secret_file.empty() : s.Has("chap_secret_file");
  const bool secret_given = inline_given || file_given;
  std::string_view secret_field = inline_given ? "reserve.chap_secret" : "reserve.chap_secret_file";
  if (inline_given && file_given) {
    errors->Add("reserve.chap_secret_file", "set together with reserve.chap_secret; give only one of them");
    c->chap_secret.clear();
  } else if (!secret_file.empty()) {
    if (CheckAbsolutePath("reserve.chap_secret_file", &secret_file, errors)) {
      ReadChapSecretFile("reserve.chap_secret_file", secret_file, &c->chap_secret, errors);
    }
  } else if (!c->chap_secret.empty()) {
    CheckChapSecret("reserve.chap_secret", c->chap_secret, "", errors);
  }
  if (user_given && !secret_given) {
    errors->Add("reserve.chap_user",
                "set without reserve.chap_secret or reserve.chap_secret_file (CHAP needs both or neither)");
  } else if (!user_given && secret_given) {
    errors->Add(secret_field, "set without reserve.chap_user (CHAP needs both or neither)");
  }

  s.Integer("io_timeout_ms", limits::kIoTimeoutMsMin, limits::kIoTimeoutMsMax, &c->io_timeout_ms);
  s.Integer("queue_depth", 1, limits::kQueueDepthMax, &c->queue_depth);
  s.Integer("bulk_target_ms", 0, limits::kBulkTargetMsMax, &c->bulk_target_ms);
  s.Integer("connect_timeout_ms", limits::kConnectTimeoutMsMin, limits::kConnectTimeoutMsMax, &c->connect_timeout_ms);
  s.Integer("renew_interval_ms", fs::kRenewIntervalMsMin, fs::kRenewIntervalMsMax, &c->renew_interval_ms);
  s.Integer("lease_ms", int64_t{fs::kRenewIntervalMsMin} * fs::kLeaseRenewalsMin, fs::kLeaseMsMax, &c->lease_ms);
  s.Integer("preempt_settle_ms", 0, fs::kPreemptSettleMsMax, &c->preempt_settle_ms);
  const uint64_t lease_min_ms = uint64_t{fs::kLeaseRenewalsMin} * c->renew_interval_ms;
  if (c->lease_ms < lease_min_ms) {
    errors->Add("reserve.lease_ms", std::to_string(c->lease_ms) + " is shorter than " +
                                        std::to_string(fs::kLeaseRenewalsMin) + " renewal intervals (" +
                                        std::to_string(lease_min_ms) + ")");
  }
}

void ParseCluster(const Section& s, Config* c, Errors* errors) {
  s.Bool("enabled", &c->cluster_enabled);
  s.Bool("auto_takeover", &c->cluster_auto_takeover);
  s.Bool("tickle_acks", &c->cluster_tickle_acks);
  s.Bool("auto_failback", &c->cluster_auto_failback);
  if (s.String("group", &c->cluster_group)) {
    const std::string& g = c->cluster_group;
    const bool ok = !g.empty() && g.size() <= 127 && std::all_of(g.begin(), g.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
    });
    if (!ok) errors->Add("cluster.group", "'" + Printable(g) + "' is not 1..127 bytes of [A-Za-z0-9._-]");
  }
  s.Integer("heartbeat_interval_ms", kClusterHeartbeatMsMin, kClusterHeartbeatMsMax, &c->cluster_heartbeat_interval_ms);
  s.Integer("network_dead_ms", int64_t{kClusterHeartbeatMsMin} * 3, kClusterDeadMsMax, &c->cluster_network_dead_ms);
  s.Integer("vip_idle_ms", 0, kClusterVipIdleMsMax, &c->cluster_vip_idle_ms);
  s.Integer("vip_move_max_ms", 0, kClusterVipMoveMaxMsMax, &c->cluster_vip_move_max_ms);
  if (const toml::node* n = s.Node("vips")) {
    const toml::array* arr = n->as_array();
    if (arr == nullptr || arr->size() > kClusterVipsMax) {
      errors->Add("cluster.vips",
                  "expected an array of at most " + std::to_string(kClusterVipsMax) + " addresses (\"A.B.C.D/N\")");
    } else {
      for (size_t i = 0; i < arr->size(); ++i) {
        const std::string field = "cluster.vips[" + std::to_string(i) + "]";
        const auto* str = arr->get(i)->as_string();
        if (str == nullptr) {
          errors->Add(field, "expected a string, got " + std::string(Describe(*arr->get(i))));
          continue;
        }
        auto v = cluster::ParseVip(str->get());
        if (!v.ok()) {
          errors->Add(field, Printable(v.status().message()));
          continue;
        }
        // One address once, whatever its prefix or spelling: the kernel
        // would hold "/24" and "/25" of it as two, one on each node.
        const auto twin = std::find_if(c->cluster_vips.begin(), c->cluster_vips.end(), [&](const std::string& t) {
          auto other = cluster::ParseVip(t);
          return other.ok() && other->addr == v->addr;
        });
        if (twin != c->cluster_vips.end()) {
          errors->Add(field, "'" + v->text + "' is the address of '" + *twin + "', listed already");
          continue;
        }
        c->cluster_vips.push_back(v->text);
      }
    }
  }
  if (s.String("vip_interface", &c->cluster_vip_interface)) {
    const std::string& i = c->cluster_vip_interface;
    if (i.empty() || i.size() >= 16 || i.find_first_of("/ \t\n:") != std::string::npos) {
      errors->Add("cluster.vip_interface", "'" + Printable(i) + "' is not an interface name");
    }
  }
  if (!c->cluster_vips.empty() && c->cluster_vip_interface.empty()) {
    errors->Add("cluster.vip_interface", "required with cluster.vips (the LAN interface the addresses go on)");
  }
  // The cache mirror's connection (cluster/mirror.h) and head forwarding
  // (daemon/head_server.h): each is this node's interconnect address and
  // the partner's, both or neither.
  auto address_pair = [&](const char* listen_key, std::string* listen, const char* peer_key, std::string* peer,
                          const char* what) {
    const std::string lk = std::string("cluster.") + listen_key, pk = std::string("cluster.") + peer_key;
    if (s.String(listen_key, listen)) {
      if (std::string why = CheckHostPort(*listen, true); !why.empty()) errors->Add(lk, why);
    }
    if (s.String(peer_key, peer)) {
      if (std::string why = CheckHostPort(*peer, true); !why.empty()) errors->Add(pk, why);
    }
    if (listen->empty() != peer->empty()) {
      errors->Add(listen->empty() ? lk : pk, std::string(listen_key) + " and " + peer_key + " go together (" + what +
                                                 ": this node's and the partner's interconnect address)");
    }
  };
  address_pair("mirror_listen", &c->cluster_mirror_listen, "mirror_peer", &c->cluster_mirror_peer, "the cache mirror");
  address_pair("forward_listen", &c->cluster_forward_listen, "forward_peer", &c->cluster_forward_peer,
               "head forwarding");
  if (const toml::node* n = s.Node("home_domains")) {
    const toml::array* arr = n->as_array();
    if (arr == nullptr || arr->empty() || arr->size() > fs::kReserveDomainsMax) {
      errors->Add("cluster.home_domains", "expected an array of 1.." + std::to_string(fs::kReserveDomainsMax) +
                                              " domain ids (the domains this node serves while the partner is up)");
    } else {
      for (size_t i = 0; i < arr->size(); ++i) {
        const std::string field = "cluster.home_domains[" + std::to_string(i) + "]";
        const auto* v = arr->get(i)->as_integer();
        if (v == nullptr || v->get() < 0 || v->get() >= fs::kReserveDomainsMax) {
          errors->Add(field, "expected a domain id 0.." + std::to_string(fs::kReserveDomainsMax - 1));
          continue;
        }
        const auto id = static_cast<uint32_t>(v->get());
        if (std::find(c->cluster_home_domains.begin(), c->cluster_home_domains.end(), id) !=
            c->cluster_home_domains.end()) {
          errors->Add(field, "domain " + std::to_string(id) + " is listed already");
          continue;
        }
        c->cluster_home_domains.push_back(id);
      }
    }
    if (!c->cluster_enabled) errors->Add("cluster.home_domains", "needs cluster.enabled = true (a controller pair)");
    if (!c->cluster_forward_peer.empty()) {
      errors->Add("cluster.home_domains",
                  "not with head forwarding (forward_listen, forward_peer) yet: each node "
                  "serves its own domains' clients on their addresses");
    }
  }
  if (c->cluster_network_dead_ms < 3 * uint64_t{c->cluster_heartbeat_interval_ms}) {
    errors->Add("cluster.network_dead_ms", std::to_string(c->cluster_network_dead_ms) +
                                               " is shorter than 3 heartbeat intervals (" +
                                               std::to_string(3 * uint64_t{c->cluster_heartbeat_interval_ms}) + ")");
  }
}

void ParseSocketMode(const Section& s, Config* c, Errors* errors) {
  const toml::node* n = s.Node("socket_mode");
  if (n == nullptr) return;
  uint64_t mode = 0;
  if (const auto* i = n->as_integer()) {
    if (i->get() < 0) {
      errors->Add("head.socket_mode", std::to_string(i->get()) + " is out of range 0600..0777");
      return;
    }
    mode = static_cast<uint64_t>(i->get());
  } else if (const auto* str = n->as_string()) {
    std::string_view v = str->get();
    if (StartsWith(v, "0o")) v.remove_prefix(2);
    if (v.empty() || v.size() > 12 || v.find_first_not_of("01234567") != std::string_view::npos) {
      errors->Add("head.socket_mode", Quote(str->get()) + " is not an octal mode like \"0660\"");
      return;
    }
    for (char ch : v) mode = mode * 8 + static_cast<uint64_t>(ch - '0');
  } else {
    errors->Add("head.socket_mode",
                "expected an octal string like \"0660\" or an integer, got " + std::string(Describe(*n)));
    return;
  }
  if (mode < kSocketModeMin || mode > kSocketModeMax) {
    std::string m = Octal(mode) + " is out of range 0600..0777";
    // 660 written as a TOML decimal integer is 01224: say how to write octal.
    if (n->is_integer() && n->as_integer()->flags() == toml::value_flags::none) {
      m += " (the integer " + std::to_string(mode) + " is decimal; write \"0660\" or 0o660)";
    }
    errors->Add("head.socket_mode", m);
    return;
  }
  if ((mode & 0600) != 0600) {
    errors->Add("head.socket_mode", Octal(mode) + " must give the owner read and write (0600)");
    return;
  }
  c->head_socket_mode = static_cast<uint32_t>(mode);
}

void ParseHead(const Section& s, Config* c, Errors* errors) {
  if (s.String("socket", &c->head_socket) && !c->head_socket.empty()) {
    CheckAbsolutePath("head.socket", &c->head_socket, errors);
  }
  ParseSocketMode(s, c, errors);
  if (s.String("socket_group", &c->head_socket_group) && !c->head_socket_group.empty()) {
    if (!GroupExists(c->head_socket_group)) {
      errors->Add("head.socket_group", "no such group " + Quote(c->head_socket_group));
    }
  }
  s.Integer("workers", 1, kHeadWorkersMax, &c->head_workers);
  s.Integer("max_connections", 1, kHeadConnectionsMax, &c->head_max_connections);
  s.Integer("max_connections_per_uid", 1, kHeadConnectionsMax, &c->head_max_connections_per_uid);
  s.Integer("max_inflight", 1, kHeadInflightMax, &c->head_max_inflight);
  s.Integer("idle_timeout_ms", kHeadIdleTimeoutMsMin, kHeadIdleTimeoutMsMax, &c->head_idle_timeout_ms);
  s.Integer("max_locks", 1, kHeadLocksMax, &c->head_max_locks);
  s.Integer("max_locks_per_session", 1, kHeadLocksMax, &c->head_max_locks_per_session);
}

void ParseAdmin(const Section& s, Config* c, Errors* errors) {
  if (s.String("socket", &c->admin_socket) && !c->admin_socket.empty()) {
    CheckAbsolutePath("admin.socket", &c->admin_socket, errors);
  }
  if (s.String("tcp", &c->admin_tcp) && !c->admin_tcp.empty()) {
    if (std::string why = CheckHostPort(c->admin_tcp); !why.empty()) errors->Add("admin.tcp", why);
  }
  struct TlsFile {
    std::string_view key;
    std::string* value;
  };
  const TlsFile files[] = {{"tls_cert", &c->tls_cert}, {"tls_key", &c->tls_key}, {"tls_client_ca", &c->tls_client_ca}};
  for (const TlsFile& f : files) {
    if (!s.String(f.key, f.value) || f.value->empty()) continue;
    const std::string field = s.Field(f.key);
    if (c->admin_tcp.empty()) {
      errors->Add(field, "set but admin.tcp is not (TLS applies only to the TCP admin listener)");
    } else if (CheckAbsolutePath(field, f.value, errors)) {
      CheckReadableFile(field, *f.value, errors, f.key == "tls_key" ? "a private key file" : "");
    }
  }
  const bool insecure_given = s.Bool("insecure_no_client_auth", &c->admin_insecure_no_client_auth);
  if (insecure_given && c->admin_tcp.empty()) {
    errors->Add("admin.insecure_no_client_auth",
                "set but admin.tcp is not (it applies only to the TCP admin listener)");
  } else if (c->admin_insecure_no_client_auth && !c->tls_client_ca.empty()) {
    errors->Add("admin.insecure_no_client_auth",
                "true together with admin.tls_client_ca: clients are authenticated; remove one of them");
  }
  if (!c->admin_tcp.empty()) {
    // Plaintext TCP would carry admin commands (format, delete) unauthenticated.
    if (c->tls_cert.empty()) errors->Add("admin.tls_cert", "required with admin.tcp (no plaintext TCP admin)");
    if (c->tls_key.empty()) errors->Add("admin.tls_key", "required with admin.tcp (no plaintext TCP admin)");
    // TLS without client certificates would let anyone who reaches the port
    // format the reserve: only on an explicit, visible choice.
    if (c->tls_client_ca.empty() && !c->admin_insecure_no_client_auth) {
      errors->Add("admin.tls_client_ca",
                  "required with admin.tcp: without it anyone who reaches the port can administer this node; set it "
                  "(clients then need a certificate it signed), or set admin.insecure_no_client_auth = true to "
                  "serve without client authentication");
    }
  }
}

// A file nasgwd writes for a server to include (Ganesha's exports, smb.conf's
// shares): absolute, of the characters both include directives take, in a
// directory that exists, not a directory itself. `key` names it in errors.
void CheckIncludeFile(const std::string& key, std::string* path_in, Errors* errors) {
  std::string& path = *path_in;
  if (!CheckAbsolutePath(key, &path, errors)) return;
  if (path.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/") !=
      std::string::npos) {
    errors->Add(key, Quote(path) +
                         " may only contain the characters [A-Za-z0-9._/-] (what Ganesha's %include and "
                         "smb.conf's include accept)");
    return;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  if (path == "/") {
    errors->Add(key, "'/' is a directory; name a file");
  } else if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    errors->Add(key, "its directory " + Quote(dir) + " does not exist");
  } else if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    errors->Add(key, Quote(path) + " is a directory; name a file");
  }
}

void ParseNfs(const Section& s, Config* c, Errors* errors) {
  if (s.String("exports_file", &c->nfs_exports_file) && !c->nfs_exports_file.empty()) {
    CheckIncludeFile("nfs.exports_file", &c->nfs_exports_file, errors);
  }
  if (s.String("ganesha_pid_file", &c->nfs_ganesha_pid_file) && !c->nfs_ganesha_pid_file.empty()) {
    if (CheckAbsolutePath("nfs.ganesha_pid_file", &c->nfs_ganesha_pid_file, errors) && c->nfs_exports_file.empty()) {
      errors->Add("nfs.ganesha_pid_file", "set but nfs.exports_file is not (nasgwd signals Ganesha after writing it)");
    }
  }
  if (s.String("ganesha_recovery_dir", &c->nfs_ganesha_recovery_dir) && !c->nfs_ganesha_recovery_dir.empty()) {
    CheckAbsolutePath("nfs.ganesha_recovery_dir", &c->nfs_ganesha_recovery_dir, errors);
  }
  if (s.String("statd_dir", &c->nfs_statd_dir) && !c->nfs_statd_dir.empty()) {
    CheckAbsolutePath("nfs.statd_dir", &c->nfs_statd_dir, errors);
  }
  if (s.String("ganesha_dbus", &c->nfs_ganesha_dbus) && !c->nfs_ganesha_dbus.empty()) {
    const std::string& a = c->nfs_ganesha_dbus;
    if (a.find(':') == std::string::npos || a.find_first_of(" \t\n\r") != std::string::npos || a.size() > 1024) {
      errors->Add("nfs.ganesha_dbus",
                  Quote(a) + " is not a DBus address (e.g. \"unix:path=/run/dbus/system_bus_socket\")");
    }
  }
}

void ParseSmb(const Section& s, Config* c, Errors* errors) {
  if (s.String("vfs_objects", &c->smb_vfs_objects)) {
    std::istringstream words(c->smb_vfs_objects);
    std::string w, normal;
    while (words >> w) {
      if (w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
        errors->Add("smb.vfs_objects", Quote(w) + " is not a VFS module name ([A-Za-z0-9_])");
      } else if (w == "nasgw") {
        errors->Add("smb.vfs_objects", "names the modules stacked above nasgw; nasgw itself is always last");
      }
      normal += (normal.empty() ? "" : " ") + w;
    }
    c->smb_vfs_objects = normal;
  }
  if (s.String("shares_file", &c->smb_shares_file) && !c->smb_shares_file.empty()) {
    CheckIncludeFile("smb.shares_file", &c->smb_shares_file, errors);
  }
  if (s.String("smbd_pid_file", &c->smb_smbd_pid_file) && !c->smb_smbd_pid_file.empty()) {
    if (CheckAbsolutePath("smb.smbd_pid_file", &c->smb_smbd_pid_file, errors) && c->smb_shares_file.empty()) {
      errors->Add("smb.smbd_pid_file", "set but smb.shares_file is not (nasgwd signals smbd after writing it)");
    }
  }
}

Result<Config> Parse(const std::string& text, const std::string& origin) {
  toml::parse_result parsed = toml::parse(text, origin);
  if (!parsed) {
    const toml::parse_error& e = parsed.error();
    return Status::InvalidArgument(origin + ":" + std::to_string(e.source().begin.line) + ":" +
                                   std::to_string(e.source().begin.column) + ": " + std::string(e.description()));
  }
  const toml::table& root = parsed.table();
  Errors errors;

  for (auto&& [key, value] : root) {
    const bool known = std::find(std::begin(kSections), std::end(kSections), key.str()) != std::end(kSections);
    const std::string name = Printable(key.str());
    if (known && !value.is_table()) {
      errors.Add(name, "expected a table ([" + name + "]), got " + std::string(Describe(value)));
    } else if (!known && value.is_table()) {
      errors.Add(name, "unknown section [" + name +
                           "] (known: node, reserve, head, cache, admin, metrics, shutdown, nfs, smb, cluster)");
    } else if (!known) {
      errors.Add(name, "unknown key at the top level (every key belongs in a section: [node], [reserve], ...)");
    }
  }
  auto table = [&root](std::string_view name) -> const toml::table* {
    const toml::node* n = root.get(name);
    return n ? n->as_table() : nullptr;
  };

  Config c;
  ParseNode(Section("node", table("node"), {"name", "run_dir", "state_dir", "log_level"}, &errors), &c, &errors);
  ParseReserve(
      Section("reserve", table("reserve"),
              {"luns", "initiator", "chap_user", "chap_secret", "chap_secret_file", "io_timeout_ms", "queue_depth",
               "bulk_target_ms", "connect_timeout_ms", "renew_interval_ms", "lease_ms", "preempt_settle_ms"},
              &errors),
      &c, &errors);
  ParseHead(Section("head", table("head"),
                    {"socket", "socket_mode", "socket_group", "workers", "max_connections", "max_connections_per_uid",
                     "max_inflight", "idle_timeout_ms", "max_locks", "max_locks_per_session"},
                    &errors),
            &c, &errors);
  Section cache("cache", table("cache"),
                {"memory_mib", "dirty_mib", "read_ahead_kib", "flush_after_ms", "stall_timeout_ms", "write_through",
                 "log_stable_writes", "log_slow_ms", "log_commits"},
                &errors);
  cache.Integer("memory_mib", limits::kMemoryBytesMin >> 20, limits::kMemoryBytesMax >> 20, &c.cache_memory_mib);
  cache.Integer("dirty_mib", limits::kCacheDirtyBytesMin >> 20, limits::kCacheDirtyBytesMax >> 20, &c.cache_dirty_mib);
  const uint64_t data_share = limits::SharesOf(uint64_t{c.cache_memory_mib} << 20).data;
  if ((uint64_t{c.cache_dirty_mib} << 20) > data_share / 2) {
    errors.Add("cache.dirty_mib", std::to_string(c.cache_dirty_mib) + " is more than half of the data cache's share (" +
                                      std::to_string(data_share >> 20) + " MiB) of cache.memory_mib (" +
                                      std::to_string(c.cache_memory_mib) +
                                      "; the rest is the metadata cache and request buffers)");
  }
  cache.Integer("read_ahead_kib", 0, static_cast<uint32_t>(limits::kReadAheadBytesMax >> 10), &c.cache_read_ahead_kib);
  cache.Integer("flush_after_ms", limits::kCacheFlushAfterMsMin, limits::kCacheFlushAfterMsMax,
                &c.cache_flush_after_ms);
  cache.Integer("stall_timeout_ms", limits::kCacheStallTimeoutMsMin, limits::kCacheStallTimeoutMsMax,
                &c.cache_stall_timeout_ms);
  cache.Bool("write_through", &c.cache_write_through);
  cache.Bool("log_stable_writes", &c.cache_log_stable_writes);
  cache.Bool("log_commits", &c.cache_log_commits);
  cache.Integer("log_slow_ms", 0, limits::kLogSlowMsMax, &c.cache_log_slow_ms);
  ParseAdmin(Section("admin", table("admin"),
                     {"socket", "tcp", "tls_cert", "tls_key", "tls_client_ca", "insecure_no_client_auth"}, &errors),
             &c, &errors);
  Section metrics("metrics", table("metrics"), {"listen"}, &errors);
  if (metrics.String("listen", &c.metrics_listen) && !c.metrics_listen.empty()) {
    if (std::string why = CheckHostPort(c.metrics_listen, true); !why.empty()) errors.Add("metrics.listen", why);
  }
  Section shutdown("shutdown", table("shutdown"), {"drain_ms"}, &errors);
  shutdown.Integer("drain_ms", 0, kShutdownDrainMsMax, &c.drain_ms);
  ParseNfs(Section("nfs", table("nfs"),
                   {"exports_file", "ganesha_pid_file", "ganesha_recovery_dir", "ganesha_dbus", "statd_dir"}, &errors),
           &c, &errors);
  ParseSmb(Section("smb", table("smb"), {"shares_file", "smbd_pid_file", "vfs_objects"}, &errors), &c, &errors);
  ParseCluster(Section("cluster", table("cluster"),
                       {"enabled", "group", "heartbeat_interval_ms", "network_dead_ms", "auto_takeover", "vips",
                        "vip_interface", "mirror_listen", "mirror_peer", "forward_listen", "forward_peer",
                        "vip_idle_ms", "vip_move_max_ms", "tickle_acks", "home_domains", "auto_failback"},
                       &errors),
               &c, &errors);

  // Defaults that depend on other fields.
  if (c.initiator.empty() && !c.node_name.empty()) {
    // iSCSI names are lower case and have no '_' (RFC 3722 stringprep).
    std::string name = c.node_name;
    for (char& ch : name) ch = ch == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    c.initiator = std::string(kDefaultInitiatorPrefix) + name;
  }
  const bool head_default = c.head_socket.empty();
  const bool admin_default = c.admin_socket.empty();
  if (head_default) c.head_socket = c.run_dir + "/head.sock";
  if (admin_default) c.admin_socket = c.run_dir + "/admin.sock";
  if (StartsWith(c.run_dir, "/")) {
    CheckSocketPath("head.socket", c.head_socket, head_default ? "node.run_dir" : "", &errors);
    CheckSocketPath("admin.socket", c.admin_socket, admin_default ? "node.run_dir" : "", &errors);
    if (c.head_socket == c.admin_socket) errors.Add("admin.socket", Quote(c.admin_socket) + " is also head.socket");
  }

  // Belt and braces: the block layer must read back exactly these credentials.
  if (errors.empty() && !c.chap_user.empty()) {
    for (const std::string& url : c.LunUrlsWithChap()) {
      auto u = block::ParseIscsiUrl(url);
      if (!u.ok() || u->user != c.chap_user || u->password != c.chap_secret) {
        errors.Add("reserve.chap_user", "this user and secret cannot be carried in an iSCSI URL");
        break;
      }
    }
  }

  if (!errors.empty()) return errors.ToStatus(origin);
  return c;
}

}  // namespace

std::vector<std::string> Config::LunUrlsWithChap() const {
  if (chap_user.empty() || chap_secret.empty()) return luns;
  constexpr std::string_view kScheme = "iscsi://";
  std::vector<std::string> out;
  out.reserve(luns.size());
  for (const std::string& url : luns) {
    if (StartsWith(url, kScheme)) {
      out.push_back(std::string(kScheme) + chap_user + "%" + chap_secret + "@" + url.substr(kScheme.size()));
    } else {
      out.push_back(url);
    }
  }
  return out;
}

Result<Config> ParseConfig(const std::string& text, const std::string& origin) {
  try {
    return Parse(text, origin);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(origin + ": cannot load: " + e.what());
  }
}

Result<Config> LoadConfig(const std::string& path) {
  try {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      const std::string m = path + ": " + std::strerror(err);
      if (err == ENOENT || err == ENOTDIR) return Status::NotFound(m);
      if (err == EACCES || err == EPERM) return Status::PermissionDenied(m);
      return Status::IoError(m);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const std::string m = path + ": " + std::strerror(errno);
      ::close(fd);
      return Status::IoError(m);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::InvalidArgument(path + ": not a regular file");
    }
    std::string text, why;
    const bool ok = ReadAll(fd, path, kConfigBytesMax, &text, &why);
    ::close(fd);
    if (!ok) return Status::InvalidArgument(path + ": " + why);
    return Parse(text, path);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": cannot load: " + e.what());
  }
}

}  // namespace nasgw::daemon
