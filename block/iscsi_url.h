// iSCSI LUN URLs: iscsi://[user[%password]@]host[:port]/target-iqn/lun
//
// host is a name, an IPv4 address or a bracketed IPv6 address; port defaults
// to 3260. The password may contain any character but '@' is taken as the
// last separator, so "a%b@c@host" is user "a", password "b@c". ToString()
// never prints the password: URLs go into logs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace nasgw::block {

struct IscsiUrl {
  std::string user;      // empty: no CHAP
  std::string password;  // CHAP secret
  std::string host;      // without brackets
  uint16_t port = 3260;
  std::string target;  // the target IQN
  uint32_t lun = 0;

  // "host:port", or "[v6]:port": what libiscsi's connect takes.
  std::string Portal() const;
  // The URL with the password replaced by "***".
  std::string ToString() const;
};

constexpr uint32_t kLunMax = 16383;  // SAM-2 flat space addressing

Result<IscsiUrl> ParseIscsiUrl(std::string_view url);

}  // namespace nasgw::block
