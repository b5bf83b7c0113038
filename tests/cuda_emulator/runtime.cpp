// The emulator's fibers and barriers (runtime.h). A block's threads are fibers on the calling
// thread (fiber_context.h); the scheduler resumes the first runnable one in set_schedule()'s
// order until it waits at a barrier or returns, and none runnable while threads remain is a
// deadlock.
#include "tests/cuda_emulator/runtime.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tests/cuda_emulator/fiber_context.h"

namespace tg::cuda_emulator {
namespace {

constexpr size_t kStack = 256 * 1024;

struct Copy {
  void* dst;
  const void* src;
  bool valid;
  size_t bytes;
};

enum class Wait { None, Block, Warp, Named };

// What a thread queues and completes by groups, oldest first (cp.async's copies, the deferred
// warpgroup products): `open` until committed, then a group of `closed`.
template <class T>
struct Groups {
  std::vector<T> open;
  std::deque<std::vector<T>> closed;
  bool empty() const { return open.empty() && closed.empty(); }
  void clear() {
    open.clear();
    closed.clear();
  }
  void commit() {
    closed.push_back(std::move(open));
    open.clear();
  }
  // Completes all but the `pending` newest groups: each(item), oldest first.
  template <class F>
  void complete(int pending, F&& each) {
    while (closed.size() > static_cast<size_t>(pending)) {
      std::vector<T> group = std::move(closed.front());
      closed.pop_front();
      for (T& item : group) each(item);
    }
  }
};

struct Shared;  // a registered shared-memory array (below)

struct Work {  // a deferred warpgroup product: the accumulators it writes, and itself
  float* d;
  std::function<void()> run;
};

struct Fiber {
  FiberContext ctx;
  std::unique_ptr<char[]> stack{new char[kStack]};
  Index3 tid;
  bool done = false;
  Wait wait = Wait::None;
  uint64_t gen = 0;        // the generation of the barrier it waits at
  unsigned named = 0;      // the named barrier it waits at (Wait::Named)
  uint64_t exchanges = 0;  // its warp exchanges so far: their parity picks the slot bank
  Groups<Copy> copies;
  Groups<Work> work;  // deferred (defer), with the accumulators it writes saved and poisoned
  std::vector<std::pair<float*, std::vector<float>>> saved;
  std::vector<std::pair<Shared*, size_t>> unfenced;  // chunks its copies landed in, unfenced
};

struct WarpState {
  unsigned arrived = 0, live = 32;
  uint64_t products = 0;  // warpgroup products issued (note_warpgroup_product)
  uint64_t gen = 0;
  unsigned char slots[2][32][kSlot];
  const char* what[2] = {nullptr, nullptr};  // each bank's collective, set by its first lane
};

struct Shared {
  unsigned char* data;
  size_t bytes;
  // Per 16-byte chunk, the thread whose cp.async copy landed there and which has not run
  // fence.proxy.async since (-1: none): warpgroup products must not read it (shared_at).
  std::vector<int32_t> unfenced;
};

constexpr unsigned kNamedBarriers = 16;
struct NamedBarrier {
  unsigned arrived = 0, count = 0;  // this phase's arrivals, and the count they name
  uint64_t gen = 0;
};

struct State {
  FiberContext scheduler;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  std::vector<WarpState> warps;
  unsigned block_arrived = 0, block_live = 0;
  uint64_t block_gen = 0;
  NamedBarrier named[kNamedBarriers];
  // Barrier phases completed so far, of any kind (the scheduler's cursor below).
  uint64_t releases = 0;
  Index3 block, bdim, gdim;
  const std::function<void()>* body = nullptr;
  std::string error;  // the first fault
  Order order = Order::Forward;
  Copies copies = Copies::AtWait;
};

State& state() {
  static State s;
  return s;
}
std::vector<Shared>& shared_arrays() {
  static std::vector<Shared> v;
  return v;
}

void fault(const std::string& what) {
  State& s = state();
  if (!s.error.empty()) return;
  std::ostringstream os;
  os << what << " (block " << s.block.x << ", thread "
     << (s.current ? static_cast<int>(s.current->tid.x) : -1) << ")";
  s.error = os.str();
}

Fiber& me() { return *state().current; }

void yield() { switch_fiber(me().ctx, state().scheduler); }

bool ready(const State& s, const Fiber& f) {
  switch (f.wait) {
    case Wait::None:
      return true;
    case Wait::Block:
      return s.block_gen != f.gen;
    case Wait::Warp:
      return s.warps[f.tid.x / 32].gen != f.gen;
    case Wait::Named:
      return s.named[f.named].gen != f.gen;
  }
  return false;
}

void finish(Fiber& f) {
  State& s = state();
  f.done = true;
  if (!f.copies.empty()) fault("cp.async copies still in flight at exit");
  if (!f.work.empty()) fault("warpgroup products still in flight at exit");
  WarpState& w = s.warps[f.tid.x / 32];
  --w.live;
  if (w.arrived > 0) fault("a lane exited while its warp waits in a collective");
  --s.block_live;
  if (s.block_arrived > 0 && s.block_arrived == s.block_live) {  // the others may go on
    s.block_arrived = 0;
    ++s.block_gen;
    ++s.releases;
  }
}

void entry() {
  State& s = state();
  try {
    (*s.body)();
  } catch (const std::exception& e) {
    fault(std::string("the kernel threw: ") + e.what());
  }
  finish(me());
  switch_fiber(me().ctx, s.scheduler);  // never resumed
}

// Where the block's threads wait, runs of consecutive threads that wait alike as one entry.
std::string waiting(const State& s) {
  std::ostringstream os;
  const auto where = [&](const Fiber& f) -> std::string {
    if (f.done) return "";
    switch (f.wait) {
      case Wait::Block:
        return "at __syncthreads";
      case Wait::Warp:
        return "in a warp collective";
      case Wait::Named:
        return "at named barrier " + std::to_string(f.named);
      case Wait::None:
        break;
    }
    return "runnable";
  };
  const size_t n = s.fibers.size() < s.bdim.x ? s.fibers.size() : s.bdim.x;
  for (size_t t = 0; t < n;) {
    const std::string w = where(s.fibers[t]);
    size_t end = t + 1;
    while (end < n && where(s.fibers[end]) == w) ++end;
    if (!w.empty()) {
      os << (end - t > 1 ? " threads " : " thread ") << t;
      if (end - t > 1) os << "-" << end - 1;
      os << " " << w << ";";
    }
    t = end;
  }
  return os.str();
}

void run_block(State& s, size_t shared_bytes) {
  for (Shared& a : shared_arrays()) {
    std::memset(a.data, 0xff, a.bytes);
    std::fill(a.unfenced.begin(), a.unfenced.end(), -1);
  }
  const unsigned n = s.bdim.x;
  s.warps.assign(n / 32, WarpState{});
  s.block_arrived = 0;
  s.block_live = n;
  for (NamedBarrier& b : s.named) b = NamedBarrier{};
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = s.fibers[t];
    f.tid = {t, 0, 0};
    f.done = false;
    f.wait = Wait::None;
    f.exchanges = 0;
    f.copies.clear();
    f.work.clear();
    f.saved.clear();
    f.unfenced.clear();
    make_fiber(f.ctx, f.stack.get(), kStack, entry);
  }
  // Always the first runnable thread in the order: each warp runs ahead of the ones after it
  // as far as the barriers allow, so a missing barrier shows. The threads before the one that
  // just ran were not runnable when it was picked, and can become so only when a barrier phase
  // completes (s.releases): until then the search goes on after it (a warp's shuffle is 32
  // switches, which searched the whole block each from its start).
  unsigned from = 0;
  for (;;) {
    Fiber* next = nullptr;
    unsigned at = from;
    for (; at < n && !next; ++at) {
      Fiber& f = s.fibers[s.order == Order::Forward ? at : n - 1 - at];
      if (!f.done && ready(s, f)) next = &f;
    }
    // None after it: all done, or a deadlock; a search from the start tells which.
    if (!next && from > 0) {
      from = 0;
      continue;
    }
    if (!next) {
      const bool all_done = std::all_of(s.fibers.begin(), s.fibers.begin() + n,
                                        [](const Fiber& f) { return f.done; });
      if (!all_done) fault("deadlock:" + waiting(s));
      break;
    }
    next->wait = Wait::None;
    s.current = next;
    const uint64_t releases = s.releases;
    switch_fiber(s.scheduler, next->ctx);
    s.current = nullptr;
    if (!s.error.empty()) break;
    from = s.releases == releases ? at : 0;
  }
  for (size_t w = 0; s.error.empty() && w + 3 < s.warps.size(); w += 4) {
    const uint64_t n = s.warps[w].products;
    for (size_t k = 1; k < 4; ++k)
      if (s.warps[w + k].products != n)
        fault("the warps of warpgroup " + std::to_string(w / 4) +
              " issued different numbers of warpgroup products: " + std::to_string(n) + " and " +
              std::to_string(s.warps[w + k].products));
  }
  for (unsigned id = 0; s.error.empty() && id < kNamedBarriers; ++id)
    if (s.named[id].arrived > 0)
      fault("named barrier " + std::to_string(id) + " left with " +
            std::to_string(s.named[id].arrived) + " of " + std::to_string(s.named[id].count) +
            " threads arrived");
  if (s.error.empty()) {
    for (const Shared& a : shared_arrays()) {
      for (size_t i = shared_bytes; i < a.bytes; ++i) {
        if (a.data[i] != 0xff) {
          fault("shared memory written at byte " + std::to_string(i) + ", past the launch's " +
                std::to_string(shared_bytes));
          break;
        }
      }
    }
  }
}

}  // namespace

const Index3& thread_idx() { return me().tid; }
const Index3& block_idx() { return state().block; }
const Index3& block_dim() { return state().bdim; }
const Index3& grid_dim() { return state().gdim; }

void set_schedule(Order order, Copies copies) {
  state().order = order;
  state().copies = copies;
}

bool register_shared(unsigned char* data, size_t bytes) {
  shared_arrays().push_back({data, bytes, std::vector<int32_t>((bytes + 15) / 16, -1)});
  return true;
}

void launch(unsigned blocks, unsigned threads, size_t shared_bytes,
            const std::function<void()>& body) {
  State& s = state();
  TG_CHECK(threads % 32 == 0 && threads > 0, "cuda emulator",
           "threads per block must be a multiple of 32, got ", threads);
  for (const Shared& a : shared_arrays())
    TG_CHECK(shared_bytes <= a.bytes, "cuda emulator", "the launch asks for ", shared_bytes,
             " bytes of shared memory, the emulated arrays hold ", a.bytes);
  while (s.fibers.size() < threads) s.fibers.emplace_back();
  s.body = &body;
  s.bdim = {threads, 1, 1};
  s.gdim = {blocks, 1, 1};
  s.error.clear();
  for (unsigned b = 0; b < blocks && s.error.empty(); ++b) {
    s.block = {b, 0, 0};
    run_block(s, shared_bytes);
  }
  s.body = nullptr;
  TG_CHECK(s.error.empty(), "cuda emulator", s.error);
}

namespace {
std::vector<std::string>& launch_names() {
  static std::vector<std::string> v;
  return v;
}
}  // namespace
void note_warpgroup_product() {
  State& s = state();
  if (s.current->tid.x % 32 == 0) ++s.warps[s.current->tid.x / 32].products;
}

void defer(float* d, size_t count, std::function<void()> work) {
  Fiber& f = me();
  bool pending = false;
  for (const auto& [p, values] : f.saved) pending |= p == d;
  if (!pending) {  // the values the first queued work on d starts from; d reads NaN meanwhile
    f.saved.emplace_back(d, std::vector<float>(d, d + count));
    std::fill(d, d + count, std::numeric_limits<float>::quiet_NaN());
  }
  f.work.open.push_back({d, std::move(work)});
}

void commit_deferred() { me().work.commit(); }

void wait_deferred(int pending) {
  Fiber& f = me();
  f.work.complete(pending, [&](Work& w) {
    for (auto it = f.saved.begin(); it != f.saved.end(); ++it) {
      if (it->first != w.d) continue;
      std::copy(it->second.begin(), it->second.end(), w.d);
      f.saved.erase(it);
      break;
    }
    w.run();
  });
}

void record_launch(const char* name) { launch_names().emplace_back(name); }
const std::vector<std::string>& launched() { return launch_names(); }
void clear_launches() { launch_names().clear(); }

namespace {
const Shared* g_addressed = nullptr;  // the array of the last shared_offset()
}  // namespace

uint32_t shared_offset(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (const Shared& a : shared_arrays()) {
    if (b >= a.data && b < a.data + a.bytes) {
      g_addressed = &a;
      return static_cast<uint32_t>(b - a.data);
    }
  }
  fail("cuda emulator", "a shared address of a pointer outside shared memory");
}

const unsigned char* shared_at(uint32_t offset, size_t bytes) {
  TG_CHECK(g_addressed && offset + bytes <= g_addressed->bytes, "cuda emulator",
           "a shared address past the array: ", offset);
  for (size_t c = offset / 16; c * 16 < offset + bytes; ++c) {
    const int32_t writer = g_addressed->unfenced[c];
    TG_CHECK(writer < 0, "cuda emulator", "a warpgroup product read shared memory at ", offset,
             ", where thread ", writer,
             "'s cp.async copy landed with no fence.proxy.async by that thread since");
  }
  return g_addressed->data + offset;
}

void fence_proxy_async() {
  Fiber& f = me();
  const auto tid = static_cast<int32_t>(f.tid.x);
  for (const auto& [array, chunk] : f.unfenced)
    if (array->unfenced[chunk] == tid) array->unfenced[chunk] = -1;
  f.unfenced.clear();
}

void sync_block() {
  State& s = state();
  Fiber& f = me();
  if (++s.block_arrived == s.block_live) {
    s.block_arrived = 0;
    ++s.block_gen;
    ++s.releases;
    return;
  }
  f.wait = Wait::Block;
  f.gen = s.block_gen;
  yield();
}

namespace {
// Arrives at named barrier `id`; true when this arrival completes its phase.
bool named_arrival(unsigned id, unsigned count) {
  State& s = state();
  if (id == 0 || id >= kNamedBarriers || count == 0 || count % 32 != 0 || count > s.bdim.x) {
    fault("named barrier " + std::to_string(id) + " with a count of " + std::to_string(count) +
          " (ids 1-15, counts a multiple of 32 up to the block's threads)");
    return true;
  }
  NamedBarrier& b = s.named[id];
  if (b.arrived == 0) {
    b.count = count;
  } else if (b.count != count) {
    fault("named barrier " + std::to_string(id) + " named with counts " + std::to_string(b.count) +
          " and " + std::to_string(count) + " in one phase");
  }
  if (++b.arrived < b.count) return false;
  b.arrived = 0;
  ++b.gen;
  ++s.releases;
  return true;
}
}  // namespace

void named_sync(unsigned id, unsigned count) {
  if (named_arrival(id, count)) return;
  Fiber& f = me();
  f.wait = Wait::Named;
  f.named = id;
  f.gen = state().named[id].gen;
  yield();
}

void named_arrive(unsigned id, unsigned count) { named_arrival(id, count); }

const unsigned char* warp_exchange(const char* what, const void* in, size_t bytes) {
  State& s = state();
  Fiber& f = me();
  WarpState& w = s.warps[f.tid.x / 32];
  const int bank = static_cast<int>(f.exchanges++ & 1);
  std::memcpy(w.slots[bank][f.tid.x % 32], in, bytes);
  if (w.arrived == 0) {
    w.what[bank] = what;
  } else if (std::strcmp(w.what[bank], what) != 0) {
    fault(std::string("lanes of a warp in different collectives: ") + w.what[bank] + " and " +
          what);
  }
  if (++w.arrived == w.live) {
    w.arrived = 0;
    ++w.gen;
    ++s.releases;
  } else {
    f.wait = Wait::Warp;
    f.gen = w.gen;
    yield();
  }
  return &w.slots[bank][0][0];
}

namespace {
// A copy lands, by the thread that issued it (unfenced until that thread's fence_proxy_async).
void land(const Copy& c) {
  if (c.valid) {
    std::memcpy(c.dst, c.src, c.bytes);
  } else {
    std::memset(c.dst, 0, c.bytes);
  }
  const auto* b = static_cast<const unsigned char*>(c.dst);
  for (Shared& a : shared_arrays()) {
    if (b >= a.data && b < a.data + a.bytes) {
      const size_t chunk = static_cast<size_t>(b - a.data) / 16;
      a.unfenced[chunk] = static_cast<int32_t>(me().tid.x);
      me().unfenced.emplace_back(&a, chunk);
      return;
    }
  }
}
}  // namespace

void async_copy(void* dst, const void* src, bool valid, size_t bytes) {
  if (bytes != 16 && bytes != 4) fault("cp.async of " + std::to_string(bytes) + " bytes");
  if (reinterpret_cast<uintptr_t>(dst) % bytes || reinterpret_cast<uintptr_t>(src) % bytes)
    fault("cp.async of " + std::to_string(bytes) + " bytes from or to a misaligned address");
  const Copy c{dst, src, valid, bytes};
  if (state().copies == Copies::AtIssue) land(c);
  me().copies.open.push_back(c);  // still counted in its group, to be waited for
}

void async_commit() { me().copies.commit(); }

void async_wait(int pending) {
  const bool land_now = state().copies == Copies::AtWait;
  me().copies.complete(pending, [&](const Copy& c) {
    if (land_now) land(c);
  });
}

}  // namespace tg::cuda_emulator
