// ProcessGroupGorun: a torch.distributed (c10d, torch 1.13) backend that
// forwards to gorun's C ABI (include/gorun.h). Registered from Python by
// gorun.torch_backend as backend "gorun". A group of the whole job runs on
// the job's communicator; a group of some ranks (dist.new_group(ranks)) on
// one its members make with gorun_comm_create_group.
//
// Collectives start non-blocking in gorun (gorun_i*) from the caller's
// thread; a completer thread per process group waits for them in order
// and completes each Work and its Future (one at a time: a completer that
// completes a Future a caller asked for, whose callbacks may wait for a
// later op, first hands its place to another thread; ProcessGroupGorun::run),
// so DDP's bucketed allreduces
// overlap the backward pass exactly as they do with Gloo. A caller that
// waits first with no timeout (blocking calls) claims its Work and
// completes it itself; a wait with a timeout that passes aborts the
// group's communicator (WorkGorun::wait).
// Sends and recvs wait at a gate until the caller needs them (P2PGate).
//
// At interpreter exit, gorun's atexit hook stops every group (stopAll)
// before the interpreter finalizes; a daemon thread that calls in
// afterwards waits there until the process ends (ExitPark).
//
// A call's arguments are checked before gorun sees them (Args). A refused
// call fails on every rank of the group, not just this one: gorun_refuse
// aborts the group's communicator, and the other ranks' calls fail at once
// naming this rank instead of waiting for it until GORUN_TIMEOUT.
// ATen and torch's pybind11 glue, not <torch/extension.h>: that one adds
// the whole C++ frontend (nn, optim, data, jit, serialize), which this
// file does not use and which nearly doubled its build (23 s against 13 s here).
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "gorun.h"

namespace {

std::string gorunError(int rc) {
  std::string msg = gorun_last_error();
  if (msg.empty()) msg = gorun_strerror(rc);
  // comm's errors say "gorun: ..." already; the status texts do not.
  if (msg.rfind("gorun", 0) == 0) return msg;
  return "gorun: " + msg;
}

// Args checks the arguments of one call (op, as torch names it) on the
// group's communicator comm. A check that fails refuses the call on every
// rank of comm: gorun_refuse fails it on the others, GORUN_ERR_PEER naming
// this rank, and aborts comm, as any failed operation does; then it raises
// here as TORCH_CHECK does (c10::Error, RuntimeError in Python).
class Args {
 public:
  Args(gorun_comm comm, const char* op) : comm_(comm), op_(op) {}

  const char* op() const { return op_; }

  template <typename... Msg>
  void check(bool ok, const Msg&... why) const {
    if (C10_UNLIKELY(!ok)) refuse(why...);
  }

  template <typename... Msg>
  [[noreturn]] void refuse(const Msg&... why) const {
    std::string msg = c10::str("gorun backend: ", why...);
    gorun_refuse(comm_, op_, msg.c_str());
    TORCH_CHECK(false, msg);
  }

 private:
  gorun_comm comm_;
  const char* op_;
};

gorun_dtype toDType(const Args& a, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar: return GORUN_INT8;
    case at::kShort: return GORUN_INT16;
    case at::kInt: return GORUN_INT32;
    case at::kLong: return GORUN_INT64;
    case at::kByte: return GORUN_UINT8;
    case at::kFloat: return GORUN_FLOAT32;
    case at::kDouble: return GORUN_FLOAT64;
    case at::kHalf: return GORUN_FLOAT16;
    case at::kBFloat16: return GORUN_BFLOAT16;
    case at::kBool: return GORUN_UINT8;  // one byte, 0 or 1: BAND/BOR/BXOR/MIN/MAX keep it so
    default:
      a.refuse("unsupported dtype ", t.scalar_type());
  }
}

gorun_op toOp(const Args& a, const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return GORUN_SUM;
    case c10d::ReduceOp::PRODUCT: return GORUN_PROD;
    case c10d::ReduceOp::MIN: return GORUN_MIN;
    case c10d::ReduceOp::MAX: return GORUN_MAX;
    case c10d::ReduceOp::AVG: return GORUN_AVG;
    case c10d::ReduceOp::BAND: return GORUN_BAND;
    case c10d::ReduceOp::BOR: return GORUN_BOR;
    case c10d::ReduceOp::BXOR: return GORUN_BXOR;
    case c10d::ReduceOp::PREMUL_SUM:
      a.refuse("reduce op PREMUL_SUM is not supported (torch 1.13 makes it for NCCL only): scale the tensor, then SUM");
    default:
      a.refuse("unsupported reduce op ", int(op.op_),
               " (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR and BXOR are supported)");
  }
}

// opFor is toOp, refusing a bitwise op on a floating-point tensor. A bool
// tensor travels as bytes 0 and 1: its SUM and PRODUCT are OR and AND, as
// in torch's NCCL backend (a byte sum of 2 would be a bool that is neither
// true nor false to torch's kernels: ~t gave true, and 256 ranks' sum 0).
gorun_op opFor(const Args& a, const c10d::ReduceOp& op, const at::Tensor& t) {
  gorun_op o = toOp(a, op);
  a.check(!(o >= GORUN_BAND && o <= GORUN_BXOR && at::isFloatingType(t.scalar_type())),
          "bitwise reduce ops are defined for integer and bool tensors only, not ", t.scalar_type());
  if (t.scalar_type() == at::kBool) {
    a.check(o != GORUN_AVG, "reduce op AVG is not defined for bool tensors");
    if (o == GORUN_SUM) return GORUN_BOR;
    if (o == GORUN_PROD) return GORUN_BAND;
  }
  return o;
}

// single is a call's one tensor, which may be strided: a collective works
// on a contiguous copy of it (Staged), as torch's Gloo backend does; a send
// or recv refuses it (contiguous), as Gloo's does.
const at::Tensor& single(const Args& a, const std::vector<at::Tensor>& ts) {
  a.check(ts.size() == 1, a.op(), " takes exactly one tensor per process");
  const at::Tensor& t = ts[0];
  a.check(t.device().is_cpu(), "tensors must be on the CPU");
  return t;
}

const at::Tensor& contiguous(const Args& a, const at::Tensor& t) {
  a.check(t.is_contiguous(), a.op(), "'s tensor must be contiguous");
  return t;
}

// Staged is the buffer gorun reads and writes for tensor t: t itself, or
// a contiguous copy of a strided t, which back() copies into t once the
// operation is done.
struct Staged {
  at::Tensor t, buf;
  explicit Staged(const at::Tensor& t) : t(t), buf(t.is_contiguous() ? t : t.contiguous()) {}
  void* ptr() const { return buf.data_ptr(); }
  // back is the work's `after`, or none when t was contiguous.
  std::function<void()> back() const {
    if (buf.is_same(t)) return nullptr;
    return [t = t, buf = buf]() mutable { t.copy_(buf); };
  }
};

// sameAs checks an output tensor against the input it receives elements
// of: gorun is given one dtype and one count for both buffers, so an
// output of another dtype (or on another device) would be written past
// its end or read as the wrong type.
void sameAs(const Args& a, const at::Tensor& out, const at::Tensor& in) {
  a.check(out.device().is_cpu() && in.device().is_cpu(), "tensors must be on the CPU");
  a.check(out.scalar_type() == in.scalar_type(), a.op(), " output dtype ", out.scalar_type(),
          " differs from the input's ", in.scalar_type());
}

// checkSplits: all_to_all_single's split sizes count rows (the first
// dimension) of t, one per rank, and must add up to t's rows; without
// splits the rows divide evenly. gorun is given element counts and
// raw pointers, so splits that add up to more would run past t.
void checkSplits(const Args& a, const std::vector<int64_t>& splits, const at::Tensor& t, int size,
                 const char* which) {
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    a.check(rows % size == 0, "all_to_all_single's ", which, " has ", rows, " rows, which do not divide among ", size,
            " ranks (give split sizes)");
    return;
  }
  a.check(int(splits.size()) == size, "all_to_all_single's ", which, " split sizes have ", splits.size(),
          " entries, one per rank wanted (", size, ")");
  int64_t sum = 0;
  for (int64_t s : splits) {
    a.check(s >= 0, "all_to_all_single's ", which, " split sizes are negative");
    sum += s;
  }
  a.check(sum == rows, "all_to_all_single's ", which, " split sizes add up to ", sum, " rows, the tensor has ", rows);
}

// onCPU checks every tensor of a list.
void onCPU(const Args& a, const std::vector<at::Tensor>& ts) {
  for (auto& t : ts) a.check(t.device().is_cpu(), "tensors must be on the CPU");
}

}  // namespace

namespace c10d {

// Set when a process group of this process records a timeline
// (GORUN_TIMELINE): each call then becomes a span on the "torch" row, from
// the call to its completion, beside the collectives it runs.
std::atomic<bool> g_tracing{false};

// Set on a completer thread whose own group's destructor ran on it: a
// future's callback there dropped the group's last reference (a closure
// holding it). A thread cannot join itself, so the destructor detaches
// it, and the completer returns without touching the freed group.
thread_local bool t_groupGone = false;

// Set by stopAll at interpreter exit once every group is stopped; the
// thread that runs the exit (stopAll's caller) is written before it.
std::atomic<bool> g_exited{false};
std::thread::id g_exitThread;

// ExitPark holds a thread other than the exiting one that enters the
// backend (an operation, a Work's wait, is_completed or get_future) once
// the groups were stopped at exit, or returns from it then: a daemon
// thread, since the interpreter has joined the others. torch called in
// with the GIL let go, and once the interpreter finalizes, a thread that
// takes it back is ended where it stands (PyThread_exit_thread), which
// torch's GIL guard, unwound, turned into std::terminate (SIGABRT at
// exit; Gloo's group does so too). So the thread waits here, without the
// GIL, until the process ends, as CPython 3.14 holds such threads itself.
// A thread that holds the GIL (so took none back) goes on. It is the
// first local of each entry point, so that none of the entry's locks or
// locals are held while it waits.
struct ExitPark {
  ExitPark() { park(); }
  ~ExitPark() { park(); }
  ExitPark(const ExitPark&) = delete;
  ExitPark& operator=(const ExitPark&) = delete;

  static void park() {
    if (C10_LIKELY(!g_exited.load(std::memory_order_acquire)) || std::this_thread::get_id() == g_exitThread) return;
    if (Py_IsInitialized() && PyGILState_Check()) return;
    for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
  }
};

// P2PGate holds the completer back from a send or recv until the caller
// needs it. gorun runs started isends and irecvs together, as one group,
// when something needs one of them (gorun.h): a completer that waited for
// an isend as soon as it was started would run the group before the
// caller had started its irecv, and two ranks each sending the other a
// message too large to be buffered (256 KiB and up) would each wait for a
// receive queued behind their send. So a send or recv is released to the
// completer when gorun itself would run it for the caller: the caller
// waits on, tests (is_completed) or asks for the future of any send or
// recv of the group, or starts another operation. The queue of works
// shares the gate's lock; works hold the gate, as they may outlive the
// group.
//
// The gate's lock also guards the watchdog's list (ProcessGroupGorun::watch),
// which wcv wakes when sends and recvs are released: their time starts then.
struct P2PGate {
  std::mutex mu;
  std::condition_variable cv;
  std::condition_variable wcv;  // the watchdog's
  uint64_t started = 0;   // works enqueued; a work's seq is the count at its enqueue
  uint64_t released = 0;  // sends and recvs with seq <= released may be waited for
  bool stop = false;

  void releaseAll() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (released == started) return;
      released = started;
    }
    cv.notify_all();
    wcv.notify_all();
  }
};

using Clock = std::chrono::steady_clock;

// completeFuture runs a future's completion that WorkGorun::complete
// returned. c10's Future keeps a then() callback's error in the future
// then() made; nothing else is thrown here, and neither a completer
// thread nor the wait() that runs it must end so.
inline void completeFuture(const std::function<void()>& fut) {
  try {
    fut();
  } catch (...) {
  }
}

class WorkGorun : public Work {
 public:
  WorkGorun(int rank, OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }

  // A send's or recv's future completes once the group runs, which asking
  // for it allows: ask after starting every message of the exchange.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    const ExitPark park;
    release();
    int state = kNotAsked;
    if (!futureState_.compare_exchange_strong(state, kAsked) && state == kCompletedUnasked) {
      // complete() is completing it with no callbacks, where it stands: a
      // then() added before it is done would run there.
      future_->wait();
    }
    return future_;
  }

  bool isCompleted() override {
    const ExitPark park;
    release();
    return Work::isCompleted();
  }

  // wait with a timeout raises at the timeout. gorun_wait takes no bound,
  // so such a wait leaves the request to the completer; and gorun cannot
  // cancel an operation in flight, so it then aborts the communicator (as
  // torch's NCCL backend does): the operation and every later one on it
  // fail, on this rank and its peers, instead of hanging behind it.
  bool wait(std::chrono::milliseconds timeout) override {
    const ExitPark park;
    release();
    // A caller that waits with no bound (every blocking collective)
    // finishes the request itself: one thread hop less than through the
    // completer.
    if (timeout == kNoTimeout && req && !inOrder && claim()) {
      // The future's callbacks, if asked for, run here: this thread waits
      // anyway, and the completer is free for the operations they wait for.
      if (auto fut = complete(gorun_wait(req))) completeFuture(fut);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      lock.unlock();
      std::string why = "gorun backend: Work.wait timed out after " + std::to_string(timeout.count()) + " ms on " +
                        opTypeToString(retrieveOpType()) +
                        "; gorun cannot cancel an operation in flight, so it aborted the group's communicator: "
                        "this operation and every later one on the group fail";
      if (comm) gorun_abort(comm, why.c_str());
      TORCH_CHECK(false, why);
    }
    if (exception_) std::rethrow_exception(exception_);
    lock.unlock();
    // An asked-for future completes after the work (complete): once
    // wait() returns, get_future().value() is there, as with Gloo.
    if (futureState_.load() == kAsked) future_->wait();
    return true;
  }

  // complete runs on the completer thread once gorun finished the
  // request, or on the caller's that claimed it. It completes the future
  // too unless a caller asked for it, whose callbacks may wait for a later
  // operation of the group: then it returns the future's completion, for
  // its caller to run once the completer's place is free for another
  // thread (ProcessGroupGorun::run).
  std::function<void()> complete(int rc) {
    std::exception_ptr err;
    if (rc == GORUN_OK) {
      try {
        if (after) after();
      } catch (...) {
        err = std::current_exception();
      }
    } else {
      err = std::make_exception_ptr(std::runtime_error(gorunError(rc)));
    }
    // The watchdog's abort failed it: say why, rather than "aborted".
    if (err && timedOut_.load()) err = std::make_exception_ptr(std::runtime_error(timeoutWhy_));
    finish(err);
    finished_.store(true);
    if (traceStart && comm) {
      int64_t bytes = 0;
      for (auto& t : outputs_) bytes += t.numel() * t.element_size();
      gorun_trace_span(comm, "torch", opTypeToString(retrieveOpType()).c_str(), bytes, traceStart);
    }
    auto fut = future_;
    auto done = [fut, err, outs = outputs_]() {
      if (err) {
        fut->setError(err);
      } else {
        fut->markCompleted(c10::IValue(outs));
      }
    };
    // A future no one asked for has no callbacks yet: complete it here
    // (getFuture meanwhile waits for it).
    int state = kNotAsked;
    if (futureState_.compare_exchange_strong(state, kCompletedUnasked)) {
      done();
      return nullptr;
    }
    return done;
  }

  // expire is the watchdog's: the work outlived its process group's
  // timeout (init_process_group's or new_group's timeout=). As a wait
  // that times out, it aborts the group's communicator, which fails this
  // operation and every later one on the group, on every member.
  void expire(std::chrono::milliseconds timeout) {
    if (finished_.load()) return;
    timeoutWhy_ = "gorun backend: " + opTypeToString(retrieveOpType()) + " timed out after " +
                  std::to_string(timeout.count()) +
                  " ms, the process group's timeout (init_process_group or new_group timeout=); gorun cannot "
                  "cancel an operation in flight, so it aborted the group's communicator: this operation and "
                  "every later one on the group fail";
    timedOut_.store(true);
    if (comm) gorun_abort(comm, timeoutWhy_.c_str());
  }

  bool finished() const { return finished_.load(); }

  // claim makes the caller the one that waits for req and completes the
  // work: exactly one of wait() and the completer thread does.
  bool claim() { return !claimed_.exchange(true); }

  // release lets the completer wait for every send and recv started so
  // far: the caller needs this one, and gorun runs them as one group.
  void release() {
    if (p2p && gate) gate->releaseAll();
  }

  gorun_request req = 0;
  std::function<void()> after;  // e.g. unpack a gathered buffer
  gorun_comm comm = 0;          // set by enqueue, for the span
  bool p2p = false;             // a send or recv: held at the gate
  bool inOrder = false;         // completes after the works before it: the completer's alone
  uint64_t seq = 0;             // set by enqueue
  std::shared_ptr<P2PGate> gate;
  // When the watchdog expires this work: set at enqueue, or for a send or
  // recv once released (until then gorun has not started it). Guarded by
  // the gate's lock.
  Clock::time_point deadline = Clock::time_point::max();
  int64_t traceStart = g_tracing.load(std::memory_order_relaxed) ? gorun_trace_now() : 0;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> claimed_{false};
  std::atomic<bool> finished_{false};
  // kNotAsked until getFuture (kAsked) or until complete() found no one
  // had asked (kCompletedUnasked).
  static constexpr int kNotAsked = 0, kAsked = 1, kCompletedUnasked = 2;
  std::atomic<int> futureState_{kNotAsked};
  std::atomic<bool> timedOut_{false};
  std::string timeoutWhy_;  // written before timedOut_ is set
};

class ProcessGroupGorun : public ProcessGroup {
 public:
  // A group of the whole job runs on comm, the job's communicator (ranks
  // empty). Any other group gets a communicator of its own, made from comm
  // by its members alone (ranks: their ranks in comm, in group-rank
  // order; tag: the same on every member, another for each group), which
  // the group owns and finalizes.
  //
  // Its checks stay local (TORCH_CHECK, not Args): they are of torch's
  // own bookkeeping, not of a call's arguments. ranks and size come from
  // one list on every member, and are compared before the group's
  // communicator exists; the rank and size gorun reports, once every
  // member has made it, so no member is left waiting for this one.
  // timeoutMs bounds each operation (torch's process-group timeout; 0:
  // none but GORUN_TIMEOUT, which bounds every wait in gorun anyway).
  ProcessGroupGorun(int64_t comm, int rank, int size, const std::vector<int>& ranks, int tag, int64_t timeoutMs)
      : ProcessGroup(rank, size),
        comm_(comm),
        // at most a century, so that now + timeout_ fits the clock
        timeout_(std::min<int64_t>(timeoutMs, int64_t(100) * 365 * 24 * 3600 * 1000)) {
    if (!ranks.empty()) {
      TORCH_CHECK(int(ranks.size()) == size, "gorun backend: a group of ", size, " ranks given ", ranks.size(),
                  " global ranks");
      gorun_comm group = 0;
      check(gorun_comm_create_group(comm, ranks.data(), int(ranks.size()), tag, &group));
      comm_ = group;
      owned_ = true;
    }
    int r = -1, s = -1;
    check(gorun_rank(comm_, &r));
    check(gorun_size(comm_, &s));
    if ((r != rank || s != size) && owned_) gorun_finalize(comm_);  // no destructor runs after a throw
    TORCH_CHECK(r == rank && s == size, "gorun backend: torch says rank ", rank, " of ", size, " but gorun's ",
                owned_ ? "group" : "job", " says rank ", r, " of ", s);
    if (gorun_tracing(comm_)) g_tracing.store(true);
    {
      std::lock_guard<std::mutex> lock(gate_->mu);
      completers_.emplace_back([this] { run(); });
    }
    if (timeout_.count() > 0) watchdog_ = std::thread([this] { watch(); });
  }

  // The destructor waits for the completers to finish the works left,
  // and a completer may be running a future's then() callback, which
  // takes the GIL. Python drops its last reference to the group with the
  // GIL held (destroy_process_group, del): waiting so, it waited forever.
  // So it lets the GIL go while it waits, as torch's holder of Gloo's and
  // NCCL's groups does (IntrusivePtrNoGilDestructor); here, so that any
  // last reference (a DDP reducer's too) is covered.
  ~ProcessGroupGorun() override { shutdownNoGIL(); }

  // release_resources, not the destructor, runs when the last reference
  // goes while a weak one is left, as stopAll's list keeps to every group
  // (the memory stays until that goes): the destructor's work is done then.
  void release_resources() override { shutdownNoGIL(); }

  // stop is the group's shutdown at interpreter exit (stopAll, from
  // torch_backend's exit hook, without the GIL): it waits for the works
  // left and their futures' then() callbacks, and stops the group's
  // threads, while Python still lets them take the GIL. Once the interpreter finalizes,
  // a thread that takes the GIL is ended inside the callback (take_gil's
  // PyThread_exit_thread), and torch's callback wrapper, unwound, cleared
  // a thread state whose frames were gone: SIGSEGV at exit. Then it
  // finalizes a communicator the group owns, as a destroy does: a member
  // whose exit waits for an operation that this rank never started fails
  // it at once, naming this rank (stopAll). The job's communicator is
  // gorun's exit hook's to finalize.
  void stop() { shutdown(); }

  // owns: the group runs on a communicator of its own, not the job's.
  bool owns() const { return owned_; }

  const std::string getBackendName() const override { return "gorun"; }

  c10::intrusive_ptr<Work> allreduce(std::vector<at::Tensor>& ts, const AllreduceOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "all_reduce");
    const at::Tensor& t = single(a, ts);
    Staged s(t);
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::ALLREDUCE, ts);
    check(gorun_iallreduce(comm_, s.ptr(), s.ptr(), t.numel(), toDType(a, t), opFor(a, opts.reduceOp, t), &w->req));
    w->after = s.back();
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                               const AllreduceCoalescedOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "all_reduce_coalesced");
    a.check(!ts.empty(), "all_reduce_coalesced of no tensors");
    onCPU(a, ts);
    for (auto& t : ts) a.check(t.scalar_type() == ts[0].scalar_type(), "coalesced tensors differ in dtype");
    std::vector<at::Tensor> flat;
    for (auto& t : ts) flat.push_back(t.reshape(-1));
    at::Tensor buf = at::cat(flat);
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::ALLREDUCE_COALESCED, ts);
    check(gorun_iallreduce(comm_, buf.data_ptr(), buf.data_ptr(), buf.numel(), toDType(a, buf),
                           opFor(a, opts.reduceOp, buf), &w->req));
    std::vector<at::Tensor> outs = ts;
    w->after = [buf, outs]() mutable {
      int64_t off = 0;
      for (auto& t : outs) {
        t.copy_(buf.narrow(0, off, t.numel()).view_as(t));
        off += t.numel();
      }
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> broadcast(std::vector<at::Tensor>& ts, const BroadcastOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "broadcast");
    const at::Tensor& t = single(a, ts);
    Staged s(t);
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::BROADCAST, ts);
    check(gorun_ibroadcast(comm_, s.ptr(), t.numel(), toDType(a, t), int(opts.rootRank), &w->req));
    w->after = s.back();
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                     const AllgatherOptions&) override {
    const ExitPark park;
    const Args a(comm_, "all_gather");
    const at::Tensor in = single(a, ins).contiguous();
    a.check(outs.size() == 1 && int(outs[0].size()) == getSize(), "all_gather needs one list of ", getSize(),
            " output tensors");
    onCPU(a, outs[0]);
    for (auto& o : outs[0]) {
      a.check(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
              "all_gather output tensors must match the input");
    }
    at::Tensor flat = at::empty({in.numel() * getSize()}, in.options());
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::ALLGATHER, outs[0]);
    check(gorun_iallgather(comm_, in.data_ptr(), flat.data_ptr(), in.numel(), toDType(a, in), &w->req));
    std::vector<at::Tensor> targets = outs[0];
    int64_t n = in.numel();
    w->after = [in, flat, targets, n]() mutable {
      for (size_t r = 0; r < targets.size(); r++) targets[r].copy_(flat.narrow(0, r * n, n).view_as(targets[r]));
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& out, at::Tensor& in, const AllgatherOptions&) override {
    const ExitPark park;
    const Args a(comm_, "all_gather_into_tensor");
    sameAs(a, out, in);
    a.check(out.numel() == in.numel() * getSize(), "output must be size × input");
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::_ALLGATHER_BASE, std::vector<at::Tensor>{out});
    at::Tensor from = in.contiguous();
    Staged to(out);
    check(gorun_iallgather(comm_, from.data_ptr(), to.ptr(), in.numel(), toDType(a, in), &w->req));
    w->after = [from, back = to.back()]() {
      if (back) back();
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                const ReduceScatterOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "reduce_scatter_tensor");
    sameAs(a, out, in);
    a.check(in.numel() == out.numel() * getSize(), "input must be size × output");
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::_REDUCE_SCATTER_BASE, std::vector<at::Tensor>{out});
    at::Tensor from = in.contiguous();
    Staged to(out);
    check(gorun_ireduce_scatter(comm_, from.data_ptr(), to.ptr(), out.numel(), toDType(a, in),
                                opFor(a, opts.reduceOp, in), &w->req));
    w->after = [from, back = to.back()]() {
      if (back) back();
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> reduce(std::vector<at::Tensor>& ts, const ReduceOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "reduce");
    const at::Tensor& t = single(a, ts);
    Staged s(t);
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::REDUCE, ts);
    check(gorun_ireduce(comm_, s.ptr(), s.ptr(), t.numel(), toDType(a, t), opFor(a, opts.reduceOp, t),
                        int(opts.rootRank), &w->req));
    w->after = s.back();
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> gather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                  const GatherOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "gather");
    const at::Tensor in = single(a, ins).contiguous();
    int root = int(opts.rootRank);
    at::Tensor flat;
    std::vector<at::Tensor> targets;
    if (getRank() == root) {
      a.check(outs.size() == 1 && int(outs[0].size()) == getSize(), "gather needs one list of ", getSize(),
              " output tensors at the root");
      onCPU(a, outs[0]);
      for (auto& o : outs[0]) {
        a.check(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                "gather output tensors must match the input");
      }
      flat = at::empty({in.numel() * getSize()}, in.options());
      targets = outs[0];
    } else {
      a.check(outs.empty() || outs[0].empty(), "gather output tensors are for the root only");
    }
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::GATHER, targets);
    check(gorun_igather(comm_, in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, in.numel(), toDType(a, in),
                        root, &w->req));
    auto unpack = flat.defined() ? unflatten(flat, targets) : nullptr;
    w->after = [in, unpack]() {
      if (unpack) unpack();
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                                   const ScatterOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "scatter");
    const at::Tensor& out = single(a, outs);
    int root = int(opts.rootRank);
    at::Tensor flat;
    if (getRank() == root) {
      a.check(ins.size() == 1 && int(ins[0].size()) == getSize(), "scatter needs one list of ", getSize(),
              " input tensors at the root");
      flat = flatten(a, ins[0], out);
    } else {
      a.check(ins.empty() || ins[0].empty(), "scatter input tensors are for the root only");
    }
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::SCATTER, outs);
    Staged to(out);
    check(gorun_iscatter(comm_, flat.defined() ? flat.data_ptr() : nullptr, to.ptr(), out.numel(), toDType(a, out),
                         root, &w->req));
    w->after = [flat, back = to.back()]() {  // keeps flat alive until the scatter is done
      if (back) back();
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> reduce_scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                                          const ReduceScatterOptions& opts) override {
    const ExitPark park;
    const Args a(comm_, "reduce_scatter");
    const at::Tensor& out = single(a, outs);
    a.check(ins.size() == 1 && int(ins[0].size()) == getSize(), "reduce_scatter needs one list of ", getSize(),
            " input tensors");
    at::Tensor flat = flatten(a, ins[0], out);
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::REDUCE_SCATTER, outs);
    Staged to(out);
    check(gorun_ireduce_scatter(comm_, flat.data_ptr(), to.ptr(), out.numel(), toDType(a, out),
                                opFor(a, opts.reduceOp, out), &w->req));
    w->after = [flat, back = to.back()]() {
      if (back) back();
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outSplits,
                                         std::vector<int64_t>& inSplits, const AllToAllOptions&) override {
    const ExitPark park;
    const Args a(comm_, "all_to_all_single");
    sameAs(a, out, in);
    int size = getSize();
    checkSplits(a, inSplits, in, size, "input");
    checkSplits(a, outSplits, out, size, "output");
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::ALLTOALL_BASE, std::vector<at::Tensor>{out});
    at::Tensor from = in.contiguous();
    Staged to(out);
    if (outSplits.empty() && inSplits.empty()) {
      a.check(in.numel() == out.numel() && in.numel() % size == 0,
              "all_to_all_single without splits needs equal tensors divisible by the world size");
      check(gorun_ialltoall(comm_, from.data_ptr(), to.ptr(), in.numel() / size, toDType(a, in), &w->req));
      w->after = [from, back = to.back()]() {
        if (back) back();
      };
      return enqueue(w);
    }
    // Splits count rows (the first dimension); gorun counts elements.
    auto counts = [size](const at::Tensor& t, const std::vector<int64_t>& splits) {
      int64_t rows = t.dim() == 0 ? 1 : t.size(0);
      int64_t row = rows == 0 ? 0 : t.numel() / rows;
      std::vector<size_t> c(size);
      for (int i = 0; i < size; i++) c[i] = splits.empty() ? size_t(t.numel() / size) : size_t(splits[i] * row);
      return c;
    };
    auto sc = std::make_shared<std::vector<size_t>>(counts(in, inSplits));
    auto rc = std::make_shared<std::vector<size_t>>(counts(out, outSplits));
    check(gorun_ialltoallv(comm_, from.data_ptr(), sc->data(), nullptr, to.ptr(), rc->data(), nullptr,
                           toDType(a, in), &w->req));
    w->after = [from, sc, rc, back = to.back()]() {
      if (back) back();
    };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                    const AllToAllOptions&) override {
    const ExitPark park;
    const Args a(comm_, "all_to_all");
    int size = getSize();
    a.check(int(outs.size()) == size && int(ins.size()) == size, "all_to_all needs ", size,
            " input and output tensors");
    auto sc = std::make_shared<std::vector<size_t>>(size);
    auto rc = std::make_shared<std::vector<size_t>>(size);
    std::vector<at::Tensor> flatIn;
    int64_t rtotal = 0;
    for (int i = 0; i < size; i++) {
      a.check(ins[i].scalar_type() == outs[0].scalar_type() && outs[i].scalar_type() == outs[0].scalar_type(),
              "all_to_all tensors differ in dtype");
      a.check(ins[i].device().is_cpu() && outs[i].device().is_cpu(), "tensors must be on the CPU");
      (*sc)[i] = ins[i].numel();
      (*rc)[i] = outs[i].numel();
      rtotal += outs[i].numel();
      flatIn.push_back(ins[i].reshape(-1));
    }
    at::Tensor in = at::cat(flatIn);
    at::Tensor out = at::empty({rtotal}, outs[0].options());
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::ALLTOALL, outs);
    check(gorun_ialltoallv(comm_, in.data_ptr(), sc->data(), nullptr, out.data_ptr(), rc->data(), nullptr,
                           toDType(a, out), &w->req));
    auto after = unflatten(out, outs);
    w->after = [in, sc, rc, after]() { after(); };
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    const ExitPark park;
    const Args a(comm_, "send");
    const at::Tensor& t = contiguous(a, single(a, ts));
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::SEND, ts);
    w->p2p = true;
    check(gorun_isend(comm_, t.data_ptr(), t.numel(), toDType(a, t), dst, tag, &w->req));
    return enqueue(w);
  }

  c10::intrusive_ptr<Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    const ExitPark park;
    const Args a(comm_, "recv");
    const at::Tensor& t = contiguous(a, single(a, ts));
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::RECV, ts);
    w->p2p = true;
    check(gorun_irecv(comm_, t.data_ptr(), t.numel(), toDType(a, t), src, tag, &w->req));
    return enqueue(w);
  }

  // A recv from any source (dist.recv(t) with no src) cannot be matched:
  // gorun matches each pair's messages in order. Refused on every rank,
  // so the sender fails too instead of leaving its message queued.
  c10::intrusive_ptr<Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    const ExitPark park;
    Args(comm_, "recv").refuse("recv from any source (no src) is not supported: gorun matches messages per pair of "
                               "ranks; give src");
  }

  // The barrier starts here, in the caller's order of operations: run by
  // the completer (gorun_barrier, once the operations before it were
  // done) it met another rank's next operation where an async barrier
  // was followed by one ("ranks disagree"). It completes after every
  // operation this rank started before it, as Gloo's does: the completer
  // completes works in order, and a wait() leaves it to the completer.
  c10::intrusive_ptr<Work> barrier(const BarrierOptions&) override {
    const ExitPark park;
    auto w = c10::make_intrusive<WorkGorun>(getRank(), OpType::BARRIER, std::vector<at::Tensor>{});
    w->inOrder = true;
    check(gorun_ibarrier(comm_, &w->req));
    return enqueue(w);
  }

 private:
  // shutdownNoGIL is shutdown, with the GIL let go if held.
  void shutdownNoGIL() {
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      shutdown();
    } else {
      shutdown();
    }
  }

  // shutdown stops the group's threads once its works are done, and
  // finalizes a communicator it owns; again, it does nothing.
  void shutdown() {
    stopThreads();
    if (owned_) {
      owned_ = false;
      gorun_finalize(comm_);  // not collective: the other members' later calls on it fail
    }
  }

  // stopThreads waits for the works left, then joins the completers and
  // the watchdog; again, it returns at once.
  void stopThreads() {
    {
      std::lock_guard<std::mutex> lock(gate_->mu);
      gate_->stop = true;
    }
    gate_->cv.notify_all();
    gate_->wcv.notify_all();
    // Completers finish the works left, and may start others meanwhile;
    // the watchdog bounds them still.
    for (;;) {
      std::vector<std::thread> ts;
      {
        std::lock_guard<std::mutex> lock(gate_->mu);
        if (completers_.empty()) break;
        ts.swap(completers_);
      }
      for (auto& t : ts) {
        if (t.get_id() == std::this_thread::get_id()) {
          t.detach();  // run() returns once the callback that dropped the group has
          t_groupGone = true;
        } else {
          t.join();
        }
      }
    }
    gate_->wcv.notify_all();  // every work is done: the watchdog returns
    if (watchdog_.joinable()) watchdog_.join();
  }

  // check raises gorun's error. An argument gorun refused itself has
  // already failed the call on every rank, as Args does.
  static void check(int rc) {
    TORCH_CHECK(rc == GORUN_OK, gorunError(rc),
                g_exited.load() ? " (the interpreter is exiting: gorun has stopped its process groups and finalized "
                                  "their communicators)"
                                : "");
  }

  // flatten concatenates a rank-ordered list of tensors shaped like like.
  static at::Tensor flatten(const Args& a, const std::vector<at::Tensor>& ts, const at::Tensor& like) {
    std::vector<at::Tensor> flat;
    for (auto& t : ts) {
      a.check(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(),
              "every tensor of the list must match the output");
      a.check(t.device().is_cpu(), "tensors must be on the CPU");
      flat.push_back(t.reshape(-1));
    }
    return at::cat(flat);
  }

  // unflatten copies consecutive pieces of flat into targets.
  static std::function<void()> unflatten(at::Tensor flat, std::vector<at::Tensor> targets) {
    return [flat, targets]() mutable {
      int64_t off = 0;
      for (auto& t : targets) {
        t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
        off += t.numel();
      }
    };
  }

  c10::intrusive_ptr<Work> enqueue(c10::intrusive_ptr<WorkGorun> w) {
    w->comm = comm_;
    w->gate = gate_;
    bool wake = false;  // sends and recvs were released: the watchdog starts their time
    {
      std::unique_lock<std::mutex> lock(gate_->mu);
      if (gate_->stop) {
        // Stopped at exit (stop): no completer is left, so the caller
        // completes the work here, as the completers did each one left.
        lock.unlock();
        if (w->claim()) {
          if (auto fut = w->complete(w->req ? gorun_wait(w->req) : GORUN_OK)) completeFuture(fut);
        }
        return w;
      }
      w->seq = ++gate_->started;
      if (!w->p2p) {
        // Another operation has run gorun's group of the sends and recvs
        // started before it: they may be waited for now.
        wake = gate_->released + 1 < w->seq;
        gate_->released = w->seq;
      }
      queue_.push_back(w);
      if (timeout_.count() > 0) {
        while (!watch_.empty()) {
          auto front = watch_.front().lock();
          if (front && !front->finished()) break;
          watch_.pop_front();
        }
        // No wake: the watchdog wakes within a timeout of its last look,
        // before this deadline.
        if (!w->p2p) w->deadline = Clock::now() + timeout_;
        watch_.emplace_back(w);
      }
    }
    gate_->cv.notify_one();  // one idle completer: the one holding the place, if busy, comes back to it
    if (wake && timeout_.count() > 0) gate_->wcv.notify_all();
    return w;
  }

  // watch is the watchdog thread: it expires each work that outlives the
  // group's timeout (WorkGorun::expire), counted from its start (a send's
  // or recv's from its release), as torch's NCCL watchdog does. A Work
  // dropped once done leaves the list; a blocking call's bound is this.
  // It looks again at the earliest deadline, and at most a timeout after
  // its last look, when every later operation's deadline still lies ahead
  // (an operation started does not wake it: one thread hop less each);
  // and when sends and recvs are released. Stopped (a destroy, or at
  // exit), it goes on until the completers have finished the works left.
  void watch() {
    std::unique_lock<std::mutex> lock(gate_->mu);
    std::vector<c10::intrusive_ptr<WorkGorun>> late;
    while (!gate_->stop || !queue_.empty() || busy_) {
      auto now = Clock::now();
      auto next = Clock::time_point::max();
      for (auto it = watch_.begin(); it != watch_.end();) {
        auto w = it->lock();
        if (!w || w->finished()) {
          it = watch_.erase(it);
          continue;
        }
        if (w->deadline == Clock::time_point::max() && (w->seq <= gate_->released || gate_->stop)) {
          w->deadline = now + timeout_;  // a send or recv starts once released, or at a stop (ready)
        }
        if (w->deadline <= now) {
          late.push_back(w);
          it = watch_.erase(it);
          continue;
        }
        next = std::min(next, w->deadline);
        ++it;
      }
      if (!late.empty()) {
        lock.unlock();
        for (auto& w : late) w->expire(timeout_);
        late.clear();
        lock.lock();
        continue;
      }
      gate_->wcv.wait_until(lock, std::min(next, now + timeout_));
    }
  }

  // ready: the completer may wait for the front work.
  bool ready() const {
    const WorkGorun& w = *queue_.front();
    return !w.p2p || w.seq <= gate_->released || gate_->stop;
  }

  // run is a completer thread. One at a time holds the completer's place
  // (busy_): it takes the front work, waits for it in gorun and completes
  // it, so works complete in order. Completing a future a caller asked for
  // runs its callbacks, and one may wait for a later operation of the
  // group (DDP's PowerSGD hook waits inside a then() for its next
  // all_reduce), which needs the completer: so the thread first gives the
  // place up, to an idle thread (starting one if none is idle), then
  // completes the future where it stands, as Gloo's worker threads do,
  // and comes back idle. Handing the place on another thread first cost
  // a thread hop per future. Threads stay until the group is destroyed.
  void run() {
    std::unique_lock<std::mutex> lock(gate_->mu);
    for (;;) {
      idle_++;
      gate_->cv.wait(lock, [&] { return queue_.empty() ? gate_->stop : !busy_ && ready(); });
      idle_--;
      if (queue_.empty()) {  // stopped, every work done
        gate_->cv.notify_all();  // to the others, waiting while this one was busy
        return;
      }
      busy_ = true;
      auto w = queue_.front();
      queue_.pop_front();
      lock.unlock();
      std::function<void()> fut;
      if (w->claim()) fut = w->complete(w->req ? gorun_wait(w->req) : GORUN_OK);
      // else the caller's wait() took it
      lock.lock();
      busy_ = false;
      if (!fut) continue;
      if (idle_ == 0) {
        completers_.emplace_back([this] { run(); });
      } else if (!queue_.empty() && ready()) {
        gate_->cv.notify_one();
      }
      lock.unlock();
      completeFuture(fut);
      if (t_groupGone) {  // its callbacks dropped the group, whose destructor detached this thread
        t_groupGone = false;
        return;
      }
      lock.lock();
    }
  }

  int64_t comm_;
  bool owned_ = false;  // comm_ was made for this group
  std::shared_ptr<P2PGate> gate_ = std::make_shared<P2PGate>();
  std::deque<c10::intrusive_ptr<WorkGorun>> queue_;  // guarded by gate_->mu
  std::vector<std::thread> completers_;             // gate_->mu
  int idle_ = 0;                                     // completers waiting for a work; gate_->mu
  bool busy_ = false;                                // one holds the completer's place; gate_->mu
  std::chrono::milliseconds timeout_;
  std::deque<c10::weak_intrusive_ptr<WorkGorun>> watch_;  // works not yet done, oldest first; gate_->mu
  std::thread watchdog_;
};

// The groups of this process, for stopAll: weak, so that a group still
// shuts down when its last holder lets it go (release_resources). Never
// freed: no static destructor at exit runs a group's.
std::mutex g_groupsMu;
auto* g_groups = new std::vector<c10::weak_intrusive_ptr<ProcessGroupGorun>>;  // g_groupsMu

c10::intrusive_ptr<ProcessGroupGorun> makeGroup(int64_t comm, int rank, int size, const std::vector<int>& ranks,
                                                int tag, int64_t timeoutMs) {
  auto pg = c10::make_intrusive<ProcessGroupGorun>(comm, rank, size, ranks, tag, timeoutMs);
  std::lock_guard<std::mutex> lock(g_groupsMu);
  g_groups->erase(std::remove_if(g_groups->begin(), g_groups->end(), [](const auto& w) { return w.expired(); }),
                  g_groups->end());
  g_groups->emplace_back(pg);
  return pg;
}

// stopAll stops every group alive (ProcessGroupGorun::stop), at exit. It
// holds each while it stops it, and no lock meanwhile: a callback that
// drops another group's last reference runs that group's destructor.
//
// A group's stop waits for its operations left, and an operation whose
// peers are exiting too completes only if they started it. It stops the
// groups with communicators of their own first, each finalized once its
// operations are done, in the order they were made (torch makes groups in
// the same order on every member), and then the groups on the job's
// communicator, which gorun finalizes next: a member left waiting for an
// operation that another never started then fails at once naming it
// (that member finalized its communicator), instead of each waiting out
// GORUN_TIMEOUT for the other (a group's operation left on one rank, and
// another group's on the other).
void stopAll() {
  std::vector<c10::intrusive_ptr<ProcessGroupGorun>> live;
  {
    std::lock_guard<std::mutex> lock(g_groupsMu);
    for (auto& w : *g_groups) {
      if (auto pg = w.lock()) live.push_back(std::move(pg));
    }
  }
  std::stable_partition(live.begin(), live.end(), [](const auto& pg) { return pg->owns(); });
  for (auto& pg : live) pg->stop();
  if (!g_exited.load()) {  // once: gorun's exit hook may run again
    g_exitThread = std::this_thread::get_id();
    g_exited.store(true, std::memory_order_release);
  }
}

}  // namespace c10d

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<c10d::ProcessGroupGorun, c10d::ProcessGroup, c10::intrusive_ptr<c10d::ProcessGroupGorun>>(
      m, "ProcessGroupGorun")
      .def(py::init(&c10d::makeGroup), py::call_guard<py::gil_scoped_release>());
  m.def("stop_all", &c10d::stopAll, py::call_guard<py::gil_scoped_release>(),
        "Finish every process group's operations and callbacks, and stop its threads (at exit).");
}
