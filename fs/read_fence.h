// ReadFence: data reads run without the domain's lock, so space a change
// frees must not be handed out again while a read that began before the
// change may still be reading it (it would return bytes another file wrote
// there, or zeros an UNMAP left). Retire() frees extents once every read
// that entered before it has left; reads that enter after it see the maps
// that no longer name them.
//
// A read: Enter() before it loads the extent maps it will read, Exit() after
// its last device read (ReadFence::Reader does both). A change: Retire() what
// it replaced once its metadata is durable.
//
// Thread-safety: all methods are safe to call concurrently. The free
// function runs outside the fence's lock, on the thread of the Retire or of
// the last Exit that lets it go.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "fs/allocator.h"

namespace nasgw::fs {

class ReadFence {
 public:
  using FreeFn = std::function<void(const std::vector<Extent>&)>;
  explicit ReadFence(FreeFn free) : free_(std::move(free)) {}
  ReadFence(const ReadFence&) = delete;
  ReadFence& operator=(const ReadFence&) = delete;

  uint64_t Enter() EXCLUDES(mu_);
  void Exit(uint64_t ticket) EXCLUDES(mu_);
  void Retire(std::vector<Extent> extents) EXCLUDES(mu_);
  // Extents retired and not yet freed (tests, metrics).
  size_t waiting() const EXCLUDES(mu_);

  // Enter() for its scope.
  class Reader {
   public:
    explicit Reader(ReadFence& f) : f_(f), ticket_(f.Enter()) {}
    ~Reader() { f_.Exit(ticket_); }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

   private:
    ReadFence& f_;
    const uint64_t ticket_;
  };

 private:
  const FreeFn free_;
  mutable Mutex mu_;
  uint64_t epoch_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, uint64_t> active_ GUARDED_BY(mu_);  // epoch entered -> reads in flight
  // Retired at an epoch: free once no read that entered at or before it is
  // in flight. In epoch order.
  std::deque<std::pair<uint64_t, std::vector<Extent>>> retired_ GUARDED_BY(mu_);
  size_t waiting_ GUARDED_BY(mu_) = 0;
};

}  // namespace nasgw::fs
