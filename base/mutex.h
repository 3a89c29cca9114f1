// Mutexes the compiler checks. clang's thread-safety analysis (-Wthread-safety,
// `make tsa`) proves, at compile time, that a GUARDED_BY field is read and
// written only with its mutex held, that a REQUIRES function is called only
// with its mutex held, and (with -Wthread-safety-beta) that locks named in
// ACQUIRED_BEFORE / ACQUIRED_AFTER are taken in that order. The lock order
// itself is written down in docs/architecture.md, "Lock order".
//
// Mutex and SharedMutex are std::mutex and std::shared_mutex with the
// annotations; MutexLock, ReaderLock and WriterLock are their scoped guards
// (with Unlock()/Lock() for a guard released early and taken again), and
// CondVar waits on a Mutex. On GCC the annotations expand to nothing.
//
// What the analysis cannot see: a lambda or a callback run under a lock
// (annotate the lambda: `[&]() REQUIRES(mu_) { ... }`), a lock held through
// another object's pointer it cannot name, and locks taken in a constructor
// or destructor (not analysed: nothing else can hold the object then).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#if defined(__clang__)
#define NASGW_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define NASGW_THREAD_ANNOTATION(x)
#endif

// On a class: it is a lock (a capability) of that kind.
#define CAPABILITY(x) NASGW_THREAD_ANNOTATION(capability(x))
// On a class: an RAII guard that holds the lock(s) its constructor takes.
#define SCOPED_CAPABILITY NASGW_THREAD_ANNOTATION(scoped_lockable)
// On a field: read or written only with `x` held (reads may share it).
#define GUARDED_BY(x) NASGW_THREAD_ANNOTATION(guarded_by(x))
// On a pointer field: what it points to is guarded by `x` (the pointer is not).
#define PT_GUARDED_BY(x) NASGW_THREAD_ANNOTATION(pt_guarded_by(x))
// On a mutex: taken before / after the named ones when both are held.
#define ACQUIRED_BEFORE(...) NASGW_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) NASGW_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// On a function: the caller holds these exclusively / at least shared.
#define REQUIRES(...) NASGW_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) NASGW_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// On a function: takes / releases the locks (the object itself when none is named).
#define ACQUIRE(...) NASGW_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) NASGW_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) NASGW_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) NASGW_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) NASGW_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: the caller must not hold these (it takes them itself).
#define EXCLUDES(...) NASGW_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: after it returns, the analysis takes the lock as held.
#define ASSERT_CAPABILITY(x) NASGW_THREAD_ANNOTATION(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) NASGW_THREAD_ANNOTATION(assert_shared_capability(x))
// On a function: it returns a reference to the lock `x`.
#define RETURN_CAPABILITY(x) NASGW_THREAD_ANNOTATION(lock_returned(x))
// On a function: its body is not analysed (say why beside it).
#define NO_THREAD_SAFETY_ANALYSIS NASGW_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace nasgw {

class CondVar;

// std::mutex, annotated.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds it, where it cannot see that
  // (no run-time check).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// std::shared_mutex, annotated: exclusive for changes, shared for reads.
class CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void ReaderLock() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void ReaderUnlock() RELEASE_SHARED() { mu_.unlock_shared(); }
  void AssertHeld() const ASSERT_CAPABILITY(this) {}
  void AssertReaderHeld() const ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex for its scope. Unlock() releases it early (the destructor
// then does nothing); Lock() takes it again.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// Holds a SharedMutex exclusively for its scope; Unlock()/Lock() as MutexLock.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

  void Unlock() RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  SharedMutex& mu_;
  bool held_ = true;
};

// Holds a SharedMutex shared for its scope; Unlock()/Lock() release and
// take it again, shared.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.ReaderLock(); }
  ~ReaderLock() RELEASE() {
    if (held_) mu_.ReaderUnlock();
  }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

  void Unlock() RELEASE() {
    mu_.ReaderUnlock();
    held_ = false;
  }
  void Lock() ACQUIRE_SHARED() {
    mu_.ReaderLock();
    held_ = true;
  }

 private:
  SharedMutex& mu_;
  bool held_ = true;
};

// A condition variable over a Mutex the caller holds (std::condition_variable
// underneath: waiting releases the mutex and takes it again before it
// returns). Spurious wake-ups happen: wait in a loop on the condition, or
// pass it as `pred`. A predicate runs with `mu` held, which the analysis
// learns from the lambda's own annotation: `[&]() REQUIRES(mu_) { ... }`.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu.mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();
  }
  // False when `timeout` passed (a wake-up may still be spurious: true says
  // nothing about the condition).
  template <class Rep, class Period>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(l, timeout) == std::cv_status::no_timeout;
    l.release();
    return woken;
  }
  template <class Clock, class Duration>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(l, deadline) == std::cv_status::no_timeout;
    l.release();
    return woken;
  }

  // Until pred() holds. The body is not analysed: it calls `pred`, whose
  // REQUIRES names the caller's mutex, with `mu` held.
  template <class Pred>
  void Wait(Mutex& mu, Pred pred) REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) Wait(mu);
  }
  // Until pred() holds or `timeout` passed; returns pred().
  template <class Rep, class Period, class Pred>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout, Pred pred)
      REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout, std::move(pred));
  }
  template <class Clock, class Duration, class Pred>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline, Pred pred)
      REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) {
      if (!WaitUntil(mu, deadline)) return pred();
    }
    return true;
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace nasgw
