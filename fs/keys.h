// The domain's metadata keys and values (internal to fs/): how every record a
// domain keeps in its MetaStore is named and encoded. The table of keys is in
// docs/fs.md ("Metadata keys") and the byte layouts in
// docs/on-disk-format.md; this is their one implementation.
//
// Keys are big-endian so that RocksDB's byte order is numeric order. Values
// with a version byte refuse versions they do not know (Corruption) rather
// than drop what they cannot read; every decoder answers Corruption for a
// truncated or malformed value, never a partly filled record.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/coding.h"
#include "base/status.h"
#include "fs/allocator.h"
#include "fs/domain.h"
#include "fs/export.h"
#include "fs/share.h"

namespace nasgw::fs::keys {

// ---- byte order
void PutBE32(std::string* s, uint32_t v);
void PutBE64(std::string* s, uint64_t v);
// Read 4 or 8 bytes at `at`; the caller makes sure they are there.
uint32_t GetBE32(std::string_view s, size_t at);
uint64_t GetBE64(std::string_view s, size_t at);

// ---- keys
// `tag` then the volume (and the inode): the prefix of a volume's (an
// inode's) keys of one kind.
std::string Prefix(char tag, uint32_t vol);
std::string Prefix(char tag, uint32_t vol, uint64_t ino);
// The first key after every key that starts with `p`.
std::string PrefixEnd(std::string p);

std::string SuperKey();                                                      // S
std::string VolKey(uint32_t vol);                                            // V vol
std::string VolNameKey(const std::string& name);                             // N name
std::string InodeKey(uint32_t vol, uint64_t ino);                            // I vol ino
std::string DirentKey(uint32_t vol, uint64_t dir, const std::string& name);  // D vol dir name
std::string CookieKey(uint32_t vol, uint64_t dir, uint64_t cookie);          // C vol dir cookie
std::string XattrKey(uint32_t vol, uint64_t ino, const std::string& name);   // X vol ino name
std::string OrphanKey(uint32_t vol, uint64_t ino);                           // O vol ino
std::string ExtentKey(uint32_t vol, uint64_t ino, uint64_t record);          // E vol ino record
// Case-folded name index for case-insensitive lookups (SMB): one key per
// entry, the folded name then the exact name, so names that differ only in
// case can coexist. Folding is Windows': each code point of valid UTF-8 is
// mapped with Unicode's simple upper-case mapping (NTFS's $UpCase: "ärger"
// and "ÄRGER" fold alike, "ß" stays), bytes that are not valid UTF-8 are
// kept. Domains made before this index kept an ASCII-only one under 'F';
// the owner rebuilds it as 'G' when it opens such a domain, then writes
// FoldDoneKey (Domain::Impl::UpgradeFoldIndex).
std::string Fold(const std::string& name);
std::string FoldPrefix(uint32_t vol, uint64_t dir, const std::string& name);  // G vol dir folded NUL
std::string FoldKey(uint32_t vol, uint64_t dir, const std::string& name);     // G vol dir folded NUL name
std::string FoldDoneKey();                                                    // U: the 'G' index is whole
constexpr size_t kFoldUpgradeBatch = 1024;                                    // keys per transaction of the rebuild
// NFS exports: the record by id, the pseudo-path index (unique), and the
// id counter (absent: no export was ever added, the next id is 1).
std::string ExportKey(uint32_t id);                // P id
std::string PseudoKey(const std::string& pseudo);  // Q pseudo
std::string ExportCounterKey();                    // R
std::string HandleSecretKey();                     // H
// SMB shares: the record by name, lower-cased (names are unique without
// regard to case, as SMB compares them).
std::string ShareKey(const std::string& name);  // B lower-cased name
// The intent log's barrier: every log entry up to the LSN it holds (u64) is
// in the store whenever this key is (fs/domain_impl.h); replay skips them.
std::string LogBarrierKey();  // L
std::string EncodeLsn(uint64_t lsn);
Result<uint64_t> DecodeLsn(std::string_view v);

// ---- snapshots (docs/snapshots.md)
// Keys whose values end in their birth (the transaction group that wrote
// them, a BE64 that MetaStore strips): the volume-scoped I D C X E G V.
bool HasBirth(std::string_view key);
// Every value HasBirth names carries its birth once this key is there; a
// domain made before snapshots gets them (birth 0) at its owner's first
// open, in batches of kBirthUpgradeBatch keys, each of which also moves
// BirthsProgressKey (the last key given one) so that a crash resumes.
std::string BirthsDoneKey();      // K
std::string BirthsProgressKey();  // J
// The intent log's last LSN when the upgrade began (EncodeLsn): entries up
// to it hold batches without births, which a replay gives birth 0 where
// the upgrade already did.
std::string BirthsLogKey();  // Jl
constexpr size_t kBirthUpgradeBatch = 1024;
constexpr size_t kBirthBytes = 8;
void PutBirth(std::string* raw, uint64_t birth);
uint64_t GetBirth(std::string_view raw);  // raw.size() >= kBirthBytes
// History: a version of `key` killed in group `kill` that a snapshot still
// sees: Y vol tag rest BE64(kill), its raw value (birth included). The
// versions of one key are contiguous and in kill order (names hold no NUL).
std::string HistoryKey(std::string_view key, uint64_t kill);
std::string HistoryPrefix(std::string_view key);  // Y vol tag rest
// The live key of a history key's prefix (Y vol tag rest -> tag vol rest).
std::string LiveKey(std::string_view history_prefix);
// Dead entries: what a kill in group `kill` of something born in `birth`
// keeps for the snapshots between them. Z vol BE64(kill) BE64(birth) kind
// what; the value is the bytes it pins (u64).
constexpr char kDeadExtent = 'x';   // what: LUN BE32, offset BE64, length BE64
constexpr char kDeadVersion = 'y';  // what: the history key
std::string DeadExtentKey(uint32_t vol, uint64_t kill, uint64_t birth, const Extent& e);
std::string DeadVersionKey(uint32_t vol, uint64_t kill, uint64_t birth, std::string_view history_key);
std::string DeadPrefix(uint32_t vol, uint64_t kill);                  // Z vol kill
std::string DeadPrefix(uint32_t vol, uint64_t kill, uint64_t birth);  // Z vol kill birth
struct DeadEntry {
  uint32_t vol = 0;
  uint64_t kill = 0, birth = 0;
  char kind = 0;
  Extent ext;               // kDeadExtent
  std::string history_key;  // kDeadVersion
  uint64_t bytes = 0;
};
Result<DeadEntry> DecodeDead(std::string_view key, std::string_view value);
std::string EncodeU64(uint64_t v);
// Snapshot records by volume and id, and their name index.
std::string SnapshotKey(uint32_t vol, uint32_t id);                  // W vol id
std::string SnapshotNameKey(uint32_t vol, const std::string& name);  // T vol name: BE32 id
struct SnapshotRec {
  std::string name;
  uint64_t txg = 0;
  Timespec created;
  bool deleting = false;  // being deleted: gone to readers, released in batches
};
constexpr uint8_t kSnapshotVersion = 1;
// Snapshot schedules: A vol name -> u8 version (1), u64 every_s, u32 keep,
// i64 last_run.
std::string ScheduleKey(uint32_t vol, const std::string& name);
constexpr uint8_t kScheduleVersion = 1;
std::string EncodeSchedule(const SnapshotSchedule& s);        // not volume or name
Result<SnapshotSchedule> DecodeSchedule(std::string_view v);  // name and volume left empty
std::string EncodeSnapshot(const SnapshotRec& r);
Result<SnapshotRec> DecodeSnapshot(std::string_view v);

// ---- values
constexpr uint8_t kRecordVersion = 1;  // inodes, volumes, the domain record (version 1)

// Times are a u64 of seconds and a u32 of nanoseconds.
void PutTime(Encoder& e, const Timespec& t);
Timespec GetTime(Decoder& d);

struct Inode {
  Attr a;
  uint64_t parent = 0;       // directories
  uint64_t next_cookie = 1;  // directories
  std::string symlink;
};
std::string EncodeInode(const Inode& in);
Result<Inode> DecodeInode(uint64_t ino, std::string_view v);  // sets a.ino

struct Dirent {
  uint64_t ino = 0;
  FileType type = FileType::kNone;
  uint64_t cookie = 0;
};
std::string EncodeDirent(const Dirent& d);
Result<Dirent> DecodeDirent(std::string_view v);

// One record of a file (version 2): the pieces that hold its data, sorted
// by their place in the record and not overlapping; what no piece covers is
// a hole and reads as zeros. A piece is whole 4 KiB blocks at a block-aligned
// place, so a write rewrites only the blocks it touches, never the record.
// Every piece keeps the transaction group that wrote it (what snapshots'
// dead lists will go by).
struct RecordPiece {
  uint32_t at = 0;  // bytes from the start of the record
  Extent ext;
  uint64_t birth = 0;  // transaction group that wrote it
  uint64_t end() const { return at + ext.length; }
  bool operator==(const RecordPiece&) const = default;
};
struct RecordMap {
  std::vector<RecordPiece> pieces;
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto& p : pieces) n += p.ext.length;
    return n;
  }
};
// Version 1 (a birth, then extents that hold the record's bytes from its
// start, in order) is still read: as pieces one after the other.
// Corruption for no pieces, pieces out of order, overlapping, empty,
// unaligned to 4 KiB, or reaching past kRecordBytesMax.
std::string EncodeRecordMap(const RecordMap& r);
Result<RecordMap> DecodeRecordMap(std::string_view v);

struct VolumeRec {
  std::string name;
  uint32_t record_bytes = kRecordBytesDefault;
  uint64_t next_ino = kRootIno + 1;
  uint64_t files = 0;
  uint64_t bytes = 0;
  // Strict mode: every write to the volume is on the SAN in place before
  // its answer (a trailing flags byte, bit 0; records made before it have
  // none and read as false).
  bool write_through = false;
  // When reads move atime (fs::Atime; a trailing byte after the flags,
  // absent in older records: relatime).
  uint8_t atime = 0;
  // The next snapshot id (a trailing u32; absent: 1). Never reused.
  uint32_t next_snap = 1;
  // A clone's origin (trailing u32 volume, u32 snapshot id, u64 group;
  // absent or volume 0: not a clone): its data pieces born by that group
  // belong to the origin's snapshot, which the clone never frees.
  uint32_t origin_vol = 0, origin_snap = 0;
  uint64_t origin_txg = 0;
};
std::string EncodeVolume(const VolumeRec& v);
Result<VolumeRec> DecodeVolume(std::string_view s);

// The domain's own record: counters and which allocation groups hold data.
// Version 2 adds the intent log (fs/intent_log.h): its salt and extents,
// taken from the data groups; a version 1 record (no log) gets one at the
// domain's first read-write open.
struct DomainRec {
  uint64_t txg = 0;  // transaction groups synced
  uint32_t next_volume = 1;
  std::vector<std::pair<AgId, uint32_t>> data_groups;  // (first group, count) per run
  uint64_t log_salt = 0;                               // 0: no intent log yet
  std::vector<Extent> log_extents;                     // the intent log's space
};
constexpr uint8_t kDomainRecVersion = 2;
std::string EncodeDomain(const DomainRec& r);
Result<DomainRec> DecodeDomain(std::string_view s);

// An export as stored: the volume by id (its identity; the name is looked up
// when the export is read) and the other fields of fs::Export. New
// fields go at the end under a new version; a decoder refuses versions it
// does not know rather than drop what it cannot read.
constexpr uint8_t kExportVersion = 1;

struct ExportRec {
  uint32_t vol = 0;
  Export e;  // e.volume is not stored
};
std::string EncodeExport(const ExportRec& r);
Result<ExportRec> DecodeExport(uint32_t id, std::string_view v);  // sets e.id
// The next export id: u8 version, u32 next (never 0).
std::string EncodeExportCounter(uint32_t next);
Result<uint32_t> DecodeExportCounter(std::string_view v);

// A share as stored: the volume by id, like an export, and the other
// fields of fs::Share. New fields go at the end under a new version.
constexpr uint8_t kShareVersion = 1;

struct ShareRec {
  uint32_t vol = 0;
  Share s;  // s.volume is not stored
};
std::string EncodeShare(const ShareRec& r);
Result<ShareRec> DecodeShare(std::string_view v);

// The secret that keys handle MACs (fs/handle.h): u8 version, 32 bytes.
constexpr uint8_t kHandleSecretVersion = 1;
std::string EncodeHandleSecret(const std::string& secret);

}  // namespace nasgw::fs::keys
