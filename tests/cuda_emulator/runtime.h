// A CPU emulator of the CUDA execution model, enough to run the tensor-core SDPA kernels
// (backends/cuda/cuda_sdpa_mma_*.cu) without a GPU: each thread of a block is a fiber, the
// block's threads run one at a time on the calling thread until each reaches a barrier
// (__syncthreads, a named barrier, or a warp-wide collective: shuffles, ldmatrix, mma), and
// blocks run one after another. It checks what a GPU would leave undefined: a barrier some
// threads never reach (a deadlock, reported instead of hanging), a lane that exits while its
// warp waits in a collective, cp.async copies still in flight at exit, shared memory written
// past the launch's size or read before any write (it starts as NaN bytes), a warpgroup
// product reading a copy's bytes before the copying thread's fence.proxy.async.
//
// It checks the kernels' logic (indices, fragments, masks, the copy pipeline's order), not their
// speed nor the hardware's rounding: mma sums exactly and rounds once, ex2.approx is exp2.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tg::cuda_emulator {

struct Index3 {
  unsigned x = 0, y = 0, z = 0;
};

// The calling fiber's thread and block, and the launch's sizes.
const Index3& thread_idx();
const Index3& block_idx();
const Index3& block_dim();
const Index3& grid_dim();

// How a block's threads are scheduled. The order in which they run: the first runnable thread
// in it runs until it waits, so each warp runs ahead of the later ones as far as the barriers
// allow, and a kernel whose result depends on the order reads shared memory another thread
// writes without a barrier between. When
// cp.async copies land: at the wait that must complete them (a read before it sees the old
// bytes), or at once (a copy into a buffer other threads still read overwrites it).
enum class Order { Forward, Reverse };
enum class Copies { AtWait, AtIssue };
void set_schedule(Order order, Copies copies);

// Runs body() as every thread of `blocks` blocks of `threads` threads (a multiple of 32), with
// `shared_bytes` of dynamic shared memory. Throws tg::Error ("[cuda emulator] ...") on the
// faults above.
void launch(unsigned blocks, unsigned threads, size_t shared_bytes,
            const std::function<void()>& body);

// The shared memory a block may have (an H100's 227 KB), and the size of the kernel files'
// arrays: those compile every kernel, including some whose shared memory exceeds the limit and
// which are never launched.
constexpr size_t kSharedOptin = 232448;
// A multiprocessor's shared memory (an H100's 228 KB), and what each block's reserves of it.
constexpr size_t kSharedPerMultiprocessor = 233472, kSharedReserved = 1024;
constexpr size_t kEmulatedSharedArray = 512 * 1024;
// The multiprocessors of the emulated device (an H100 SXM's 132), which the automatic rows per
// warp weigh.
constexpr int kMultiprocessors = 132;

// A kernel file's dynamic shared memory array (each file has its own; the emulator poisons
// every registered one before each block and checks the bytes past the launch's size after).
bool register_shared(unsigned char* data, size_t bytes);

// The names of the kernels the emulated host code launched (check_launch), oldest first, since
// the last clear_launches().
void record_launch(const char* name);
const std::vector<std::string>& launched();
void clear_launches();

// A warpgroup product issued by the calling thread's warp (wgmma.h, once a warp). At the end of
// each block, the four warps of every warpgroup must have issued as many: a warp that skips one
// its group issues would leave the hardware waiting for it.
void note_warpgroup_product();

// Work the calling thread defers until a wait, as the asynchronous warpgroup products run
// (wgmma.h): queued by defer, closed into a group by commit_deferred, run by wait_deferred,
// which runs all but the `pending` newest groups, oldest first. The `count` floats at d that
// the work writes (its accumulators) read NaN from the first deferral that names them until
// the wait that runs it, which starts it from their values at that deferral: a kernel that
// reads them early, or writes them before the wait, gets a wrong result. Work still queued
// when a thread exits is a fault.
void defer(float* d, size_t count, std::function<void()> work);
void commit_deferred();
void wait_deferred(int pending);

// A shared address (wgmma's descriptors hold them): p's offset in the registered array it lies
// in, which becomes the array that shared_at() reads; and the `bytes` bytes at such an offset.
// A pointer outside every array, or bytes past the array, are faults; so are bytes where a
// cp.async copy landed whose thread has not run fence_proxy_async() since (the products read
// through the async proxy, which sees such writes only after that fence; plain stores are not
// tracked).
uint32_t shared_offset(const void* p);
const unsigned char* shared_at(uint32_t offset, size_t bytes);
// fence.proxy.async by the calling thread: its landed copies become visible to the products.
void fence_proxy_async();

// __syncthreads().
void sync_block();

// Named barriers (bar.sync / bar.arrive with a barrier id and a thread count, PTX ISA "bar"):
// barrier `id` (1-15; 0 is __syncthreads') completes once `count` threads have arrived, those
// at named_sync waiting until it does, those at named_arrive going on at once. The threads of
// a phase must name the same count; a barrier left part-way at the block's end is a fault (the
// kernels balance their arrivals), as is waiting at one that never completes (a deadlock).
void named_sync(unsigned id, unsigned count);
void named_arrive(unsigned id, unsigned count);

// A warp-wide exchange, the collective `what` names ("shfl", "ldmatrix", ...): every lane of
// the caller's warp passes `bytes` (at most kSlot) from `in`; once all have, returns the 32
// lanes' values, lane L's at offset L * kSlot. They stay valid until the caller's next exchange.
// Lanes of one warp in different collectives are a fault.
constexpr size_t kSlot = 64;
const unsigned char* warp_exchange(const char* what, const void* in, size_t bytes);

// cp.async: a copy of `bytes` (16 or 4; zeros when !valid), landing as set_schedule() says.
void async_copy(void* dst, const void* src, bool valid, size_t bytes = 16);
void async_commit();
void async_wait(int pending);  // completes all but this thread's `pending` newest groups

}  // namespace tg::cuda_emulator
