// Bindings of the core: typed exceptions for Status codes, the engines and the
// middleware. Blocking calls release the GIL; completions of async requests
// re-acquire it on the worker thread.
//
// Lifetime of a middleware (see PyMiddleware in bind.h):
//  - every binding call copies the shared middleware pointer before it releases the
//    GIL, so a concurrent close() cannot free what the call is using;
//  - close() and the destructor stop the middleware with the GIL released, so that
//    completions of pending async requests (which take the GIL) can run;
//  - an atexit hook (registered at import, so it runs after the application's own)
//    stops every middleware still running before the interpreter starts finalizing:
//    pending requests complete and their callbacks run while Python is intact, and
//    no completion can be left to ask for the GIL later. A completion that finds
//    the interpreter finalizing anyway drops its callback without touching Python:
//    CPython terminates a thread that asks for the GIL then, which aborts the
//    process when C++ frames are on its stack.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <variant>

#include <pthread.h>

#include "python/bind.h"
#include "python/interrupt.h"

namespace nvmw::py {

namespace {

// One Python exception class per Status code, created at import (nvmw.errors re-exports).
PyObject* g_errors[16] = {};

struct StatusError {
  Status status;
};

PyObject* MakeError(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("nvmw.errors.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

std::string_view View(const nb::bytes& b) { return {b.c_str(), b.size()}; }

// A key or value given to an engine, as nvmw.Middleware takes them: bytes as they are,
// a str encoded as UTF-8, a bytearray, memoryview (contiguous or not) or other buffer
// copied. TypeError or InvalidArgumentError naming `what` otherwise (the binding's own
// TypeError listed its signature).
nb::bytes AsBytes(const char* what, nb::handle h) {
  PyObject* o = h.ptr();
  if (PyBytes_Check(o)) return nb::borrow<nb::bytes>(h);
  PyObject* b = nullptr;
  if (PyUnicode_Check(o)) {
    b = PyUnicode_AsUTF8String(o);
    if (b == nullptr) {
      PyErr_Clear();
      ThrowIfError(Status::InvalidArgument(std::string(what) +
                                           " is a str that UTF-8 cannot encode; pass bytes"));
    }
  } else if (PyObject_CheckBuffer(o)) {
    b = PyBytes_FromObject(o);
    if (b == nullptr) throw nb::python_error();
  } else {
    throw nb::type_error((std::string(what) + " must be bytes, bytearray, memoryview or str, not " +
                          Py_TYPE(o)->tp_name).c_str());
  }
  return nb::steal<nb::bytes>(b);
}

RequestClass ToClass(int cls) { return static_cast<RequestClass>(cls); }

nb::dict ClassToDict(const ClassStats& s) {
  nb::dict d;
  for (const ClassStatField& f : kClassStatFields) {
    std::visit([&](auto member) { d[nb::str(f.name.data(), f.name.size())] = s.*member; }, f.member);
  }
  return d;
}

nb::tuple NamesTuple(const auto& names) {
  nb::list out;
  for (std::string_view n : names) out.append(nb::str(n.data(), n.size()));
  return nb::tuple(out);
}

// An instance of the nvmw.errors class matching a non-OK status.
nb::object ErrorFor(const Status& s) {
  PyObject* type = g_errors[static_cast<int>(s.code())];
  if (type == nullptr) type = g_errors[0];
  std::string msg = s.message().empty() ? Status::CodeName(s.code()) : s.message();
  nb::object text = nb::steal(PyUnicode_DecodeUTF8(msg.data(), static_cast<Py_ssize_t>(msg.size()),
                                                   "backslashreplace"));
  if (!text.is_valid()) throw nb::python_error();
  return nb::handle(type)(text);
}

// False once the interpreter is finalizing (or gone): Python must not be entered
// from a thread that does not already hold the GIL.
bool PythonUsable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Stop() drains pending async requests, whose completions take the GIL: a thread
// holding it while it waits would wait forever. While finalizing, the GIL is kept
// (releasing it would let daemon threads wake up only to be terminated); every
// middleware was stopped by the exit hook before, so Stop has nothing to wait for.
void StopReleasingGil(Middleware& mw) {
  if (ShouldReleaseGil()) {
    nb::gil_scoped_release release;
    mw.Stop();
  } else {
    mw.Stop();
  }
}

// Threads started by RunDetached that have not finished (the exit hook waits).
std::atomic<int> g_background_stops{0};
std::atomic<int> g_calls_without_gil{0};  // threads inside a CallWithoutGil

// fork()s since import (ForkGeneration). In the child only this thread exists: the
// counts of threads inside calls or stopping a middleware start again from zero, so
// that its exit hook does not wait for threads of the parent.
std::atomic<uint64_t> g_fork_generation{0};
void AfterForkInChild() {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  g_background_stops.store(0, std::memory_order_relaxed);
  g_calls_without_gil.store(0, std::memory_order_relaxed);
}

// Runs fn on a detached thread that the exit hook waits for (it may hold the last
// reference to a middleware). False if the operating system refuses the thread.
bool RunDetached(std::function<void()> fn) {
  g_background_stops.fetch_add(1, std::memory_order_acq_rel);
  try {
    std::thread([fn = std::move(fn)]() mutable {
      fn();
      fn = nullptr;  // what it holds (a middleware's last reference) goes before the count
      g_background_stops.fetch_sub(1, std::memory_order_acq_rel);
    }).detach();
    return true;
  } catch (const std::system_error&) {
    g_background_stops.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }
}

// The middleware and the engine it runs on, freed together with the last holder.
struct MiddlewareBox {
  MiddlewareBox(std::shared_ptr<PyEngine> e, const MiddlewareOptions& o)
      : engine(std::move(e)), mw(o) {}
  ~MiddlewareBox() { StopReleasingGil(mw); }  // before the engine goes (members: reverse order)
  std::shared_ptr<PyEngine> engine;
  Middleware mw;
  const uint64_t fork_generation = ForkGeneration();
};

// Frees a box. When the last reference goes inside one of its own completion
// callbacks (a callback that held the last reference to its middleware, also one
// nested in another middleware's callback), the stop would wait for that very
// callback: the box is freed on a thread of its own instead. In a child forked after
// the box was made, its workers and monitor do not exist (Stop would join threads
// of the parent) and its engine is the parent's: the middleware is left alone
// (leaked). Its reference to the Python engine goes (GIL held: the box is freed by
// Python there, no completion runs in the child), or the interpreter would report
// that engine as leaked at exit; the engine itself is left alone too (~PyEngine).
struct BoxDeleter {
  void operator()(MiddlewareBox* box) const {
    if (box->fork_generation != ForkGeneration()) {
      box->engine.reset();
      return;
    }
    if (box->mw.InCompletion()) {
      if (!RunDetached([box] { delete box; })) {
        std::fprintf(stderr, "nvmw: cannot start a thread to free a middleware; leaking it\n");
      }
      return;
    }
    delete box;
  }
};

// Middlewares created from Python, for the exit hook, with the ForkGeneration() they
// were opened in. Touched with the GIL held only; never freed (the hook may run while
// other modules are being torn down).
struct LiveMiddleware {
  std::weak_ptr<Middleware> mw;
  uint64_t fork_generation;
};
std::vector<LiveMiddleware>& LiveMiddlewares() {
  static auto* live = new std::vector<LiveMiddleware>();
  return *live;
}
bool g_exiting = false;  // set by the exit hook (GIL held): no new middleware after it

void Register(const std::shared_ptr<Middleware>& mw) {
  auto& live = LiveMiddlewares();
  std::erase_if(live, [](const LiveMiddleware& w) { return w.mw.expired(); });
  live.push_back({mw, ForkGeneration()});
}

// atexit: stop every live middleware (GIL released while each drains), so that all
// accepted requests complete, and their callbacks run, before finalization begins.
// Then wait (bounded) until every thread that was inside a middleware, generator or
// replay call has taken the GIL back (each such call ends promptly once its
// middleware is stopped), and for the threads that free things handed to them.
void StopAllAtExit() {
  g_exiting = true;
  std::vector<LiveMiddleware> live;
  live.swap(LiveMiddlewares());
  for (const auto& w : live) {
    if (w.fork_generation != ForkGeneration()) continue;  // the parent's (see BoxDeleter)
    if (std::shared_ptr<Middleware> mw = w.mw.lock()) StopReleasingGil(*mw);
  }
  live.clear();  // GIL held: the last reference may free a box here
  nb::gil_scoped_release release;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((g_calls_without_gil.load(std::memory_order_acquire) > 0 ||
          g_background_stops.load(std::memory_order_acquire) > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Generators and replays freed inside a callback join their clients on threads the
  // core starts.
  const double left_s =
      std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  (void)WaitForDeferredStops(std::max(0.0, left_s));
}

// The completion of an async request from Python: runs on a worker thread (or inline
// in no-control mode) without the GIL and calls callback(error, value) with it. The
// core knows, while it runs, that this thread is inside one of the middleware's
// completions (Middleware::InCompletion): a synchronous call into it from the callback
// is refused (NotSupportedError), and close() or dropping the last reference there
// stops it on a thread of its own.
struct PyCompletion {
  std::shared_ptr<nb::object> callback;  // reset with the GIL held once called

  void operator()(const Status& s, std::string&& v) const {
    if (!PythonUsable()) {
      // Finalizing: nobody can observe the callback any more, and asking for the GIL
      // now would terminate this thread. Leak the reference rather than touch Python.
      (void)callback->release();
      return;
    }
    const PyGILState_STATE gil = PyGILState_Ensure();
    try {
      nb::object value = s.ok() ? nb::object(nb::bytes(v.data(), v.size())) : nb::none();
      nb::object error = s.ok() ? nb::none() : ErrorFor(s);
      (*callback)(error, value);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("nvmw completion callback");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nvmw: completion callback failed: %s\n", e.what());
    }
    callback->reset();  // may drop the last reference to the middleware (BoxDeleter)
    PyGILState_Release(gil);
  }
};

}  // namespace

nb::dict StatsToDict(const WindowStats& w) {
  nb::dict d;
  d["seq"] = w.seq;
  d["start_s"] = w.start_s;
  d["duration_s"] = w.duration_s;
  d["interactive"] = ClassToDict(w.interactive);
  d["batch"] = ClassToDict(w.batch);
  d["all"] = ClassToDict(w.all);
  return d;
}

bool ShouldReleaseGil() { return PythonUsable() && PyGILState_Check(); }

CallWithoutGil::CallWithoutGil() {
  g_calls_without_gil.fetch_add(1, std::memory_order_acq_rel);
  state_ = PyEval_SaveThread();
}

CallWithoutGil::~CallWithoutGil() {
  PyEval_RestoreThread(state_);
  g_calls_without_gil.fetch_sub(1, std::memory_order_acq_rel);
}

uint64_t ForkGeneration() { return g_fork_generation.load(std::memory_order_relaxed); }

void RefuseAfterFork(uint64_t generation, const char* what, const char* object) {
  if (generation == ForkGeneration()) return;
  ThrowIfError(Status::NotSupported(
      std::string(what) + ": the " + object + " was created before fork(), in the parent "
      "process; its threads do not run in this child and its store is the parent's: create "
      "one in this process instead"));
}

std::shared_ptr<Middleware> AcquireMiddleware(PyMiddleware& h, const char* what) {
  if (!h.mw) ThrowIfError(Status::Shutdown(std::string(what) + ": middleware is closed"));
  RefuseAfterFork(h.fork_generation, what, "middleware");
  return h.mw;
}

void RefuseInsideCompletion(const Middleware& mw, const char* what) {
  if (!mw.InCompletion()) return;
  ThrowIfError(Status::NotSupported(
      std::string(what) + ": called from a completion callback of the middleware it drives, "
      "it would wait for client threads that may wait for the permit of the thread running "
      "the callback"));
}

std::string OptionName(const char* what, nb::handle key) {
  if (!PyUnicode_Check(key.ptr())) {
    throw nb::type_error((std::string(what) + ": option names must be str, not " +
                          Py_TYPE(key.ptr())->tp_name).c_str());
  }
  return nb::cast<std::string>(key);
}

const char* OptionKind(const std::type_info& type) {
  if (type == typeid(double)) return "a number";
  if (type == typeid(bool)) return "True or False";
  if (type == typeid(std::string)) return "a str";
  if (type == typeid(int)) return "an integer in [-2^31, 2^31-1]";
  if (type == typeid(int64_t)) return "an integer in [-2^63, 2^63-1]";
  return "a list of numbers";
}

uint64_t OptionUint(const std::string& what, nb::handle value) {
  PyObject* v = value.ptr();
  if (PyLong_Check(v)) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();  // negative, or above 2^64-1
      ThrowIfError(Status::InvalidArgument(what + " must be an integer in [0, 2^64-1]"));
    }
    return u;
  }
  if (PyFloat_Check(v)) {
    const double d = PyFloat_AsDouble(v);
    if (!(d >= 0 && d < 18446744073709551616.0) || d != std::floor(d)) {
      ThrowIfError(Status::InvalidArgument(what + " must be an integer in [0, 2^64-1]"));
    }
    return static_cast<uint64_t>(d);
  }
  throw nb::type_error((what + " must be an integer, not " + Py_TYPE(v)->tp_name).c_str());
}

std::string FsPath(const char* what, nb::handle path) {
  PyObject* fs = PyOS_FSPath(path.ptr());  // str or bytes; TypeError for anything else
  if (fs == nullptr) {
    PyErr_Clear();
    throw nb::type_error((std::string(what) + " must be str, bytes or os.PathLike, not " +
                          Py_TYPE(path.ptr())->tp_name).c_str());
  }
  nb::object encoded = nb::steal(PyUnicode_Check(fs) ? PyUnicode_EncodeFSDefault(fs) : fs);
  if (PyUnicode_Check(fs)) Py_DECREF(fs);
  if (!encoded.is_valid()) throw nb::python_error();
  std::string out(PyBytes_AS_STRING(encoded.ptr()), PyBytes_GET_SIZE(encoded.ptr()));
  CheckPath(what, out);
  return out;
}

void CheckPath(const char* what, const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    ThrowIfError(Status::InvalidArgument(std::string(what) + " contains a NUL character"));
  }
}

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  throw StatusError{status};
}

void BindCore(nb::module_& m) {
  PyObject* base = MakeError(m, "NvmwError", PyExc_Exception, "Base class of every nvmw error.");
  auto pair = [&](PyObject* other) { return PyTuple_Pack(2, base, other); };
  using C = Status::Code;
  g_errors[0] = base;
  g_errors[int(C::kNotFound)] =
      MakeError(m, "NotFoundError", pair(PyExc_KeyError), "Key or file does not exist.");
  g_errors[int(C::kInvalidArgument)] = MakeError(
      m, "InvalidArgumentError", pair(PyExc_ValueError), "Bad input: unknown class, oversized value, bad option.");
  g_errors[int(C::kIOError)] =
      MakeError(m, "StorageIOError", pair(PyExc_OSError), "The operating system refused (missing directory, permissions).");
  g_errors[int(C::kCorruption)] =
      MakeError(m, "CorruptionError", base, "Pool file damaged, or not an nvmw pool.");
  g_errors[int(C::kNoSpace)] = MakeError(m, "NoSpaceError", base, "Pool full; the store is unchanged.");
  g_errors[int(C::kOverloaded)] =
      MakeError(m, "OverloadedError", base, "Queue full: the request was not accepted; retry later.");
  g_errors[int(C::kShutdown)] = MakeError(m, "ShutdownError", base, "The middleware is stopped.");
  g_errors[int(C::kNotSupported)] = MakeError(m, "NotSupportedError", base, "Operation not supported.");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* type = g_errors[static_cast<int>(e.status.code())];
      if (type == nullptr) type = g_errors[0];
      std::string msg = e.status.message().empty() ? Status::CodeName(e.status.code())
                                                   : e.status.message();
      // A message may quote bytes from a file that are not UTF-8: shown escaped (\xff)
      // rather than failing with a UnicodeDecodeError in place of the error itself.
      PyObject* text = PyUnicode_DecodeUTF8(msg.data(), static_cast<Py_ssize_t>(msg.size()),
                                            "backslashreplace");
      if (text == nullptr) return;  // MemoryError is set
      PyErr_SetObject(type, text);
      Py_DECREF(text);
    }
  });

  // ---- state, stats keys and actions (nvmw/stats.h, thesis Tables 3.2 and 3.3) ----
  m.attr("STATE_NAMES") = NamesTuple(kStateNames);
  {
    nb::list keys;
    for (const ClassStatField& f : kClassStatFields) keys.append(nb::str(f.name.data(), f.name.size()));
    m.attr("CLASS_STAT_KEYS") = nb::tuple(keys);
    nb::list deltas;
    for (const auto& d : kActionDeltas) deltas.append(nb::make_tuple(d[0], d[1]));
    m.attr("ACTION_DELTAS") = nb::tuple(deltas);
  }
  m.attr("N_ACTIONS") = kNumActions;
  m.def(
      "apply_action",
      [](std::pair<int, int> threads, int action, int max_threads) {
        if (action < 0 || action >= kNumActions) {
          throw nb::value_error(("action must be in [0, " + std::to_string(kNumActions - 1) +
                                 "], got " + std::to_string(action)).c_str());
        }
        if (max_threads < 1) throw nb::value_error("max_threads must be >= 1");
        return ApplyAction(threads.first, threads.second, action, max_threads);
      },
      nb::arg("threads"), nb::arg("action"), nb::arg("max_threads") = MiddlewareOptions().max_threads,
      "Thread counts (interactive, batch) after a thesis Table 3.3 action, each clamped to\n"
      "[1, max_threads]. ValueError for an action outside 0..8.");

  // ---- engines ----
  nb::class_<PyEngine>(m, "Engine", "A key-value engine (pmem or memory). Thread-safe.")
      .def_prop_ro("name", [](PyEngine& e) { return std::string(e.engine->Name()); })
      .def(
          "get",
          [](PyEngine& e, nb::handle key_arg) -> nb::object {
            RefuseAfterFork(e.fork_generation, "get", "engine");
            nb::bytes key = AsBytes("key", key_arg);
            std::string value;
            Status s;
            {
              nb::gil_scoped_release release;
              s = e.engine->Get(View(key), &value);
            }
            if (s.IsNotFound()) return nb::none();
            ThrowIfError(s);
            return nb::bytes(value.data(), value.size());
          },
          nb::arg("key").none())
      .def(
          "put",
          [](PyEngine& e, nb::handle key_arg, nb::handle value_arg) {
            RefuseAfterFork(e.fork_generation, "put", "engine");
            nb::bytes key = AsBytes("key", key_arg);
            nb::bytes value = AsBytes("value", value_arg);
            Status s;
            {
              nb::gil_scoped_release release;
              s = e.engine->Put(View(key), View(value));
            }
            ThrowIfError(s);
          },
          nb::arg("key").none(), nb::arg("value").none())
      .def(
          "remove",
          [](PyEngine& e, nb::handle key_arg) {
            RefuseAfterFork(e.fork_generation, "remove", "engine");
            nb::bytes key = AsBytes("key", key_arg);
            Status s;
            {
              nb::gil_scoped_release release;
              s = e.engine->Remove(View(key));
            }
            if (s.IsNotFound()) return false;
            ThrowIfError(s);
            return true;
          },
          nb::arg("key").none())
      .def(
          "exists",
          [](PyEngine& e, nb::handle key_arg) {
            RefuseAfterFork(e.fork_generation, "exists", "engine");
            nb::bytes key = AsBytes("key", key_arg);
            Status s;
            {
              nb::gil_scoped_release release;  // an emulated device may sleep here
              s = e.engine->Exists(View(key));
            }
            if (s.IsNotFound()) return false;
            ThrowIfError(s);
            return true;
          },
          nb::arg("key").none())
      .def("count", [](PyEngine& e) {
        RefuseAfterFork(e.fork_generation, "count", "engine");
        return e.engine->Count();
      });

  m.def(
      "open_pmem_engine",
      [](nb::handle path_arg, uint64_t pool_size_bytes, bool create_if_missing,
         uint64_t bucket_count, uint64_t max_value_bytes, bool verify_checksums,
         bool paranoid_checks, uint32_t file_mode, bool huge_pages) {
        if (file_mode > 07777) {
          ThrowIfError(Status::InvalidArgument("file_mode must be permission bits (0 to 0o7777), got " +
                                               std::to_string(file_mode)));
        }
        const std::string path = FsPath("path", path_arg);
        PmemOptions o;
        o.pool_size_bytes = pool_size_bytes;
        o.create_if_missing = create_if_missing;
        o.bucket_count = bucket_count;
        o.max_value_bytes = max_value_bytes;
        o.verify_checksums = verify_checksums;
        o.paranoid_checks = paranoid_checks;
        o.file_mode = file_mode;
        o.huge_pages = huge_pages;
        auto h = std::make_shared<PyEngine>();
        Status s;
        {
          nb::gil_scoped_release release;
          s = OpenPmemEngine(path, o, &h->engine);
        }
        ThrowIfError(s);
        return h;
      },
      nb::arg("path").none(), nb::arg("pool_size_bytes") = PmemOptions().pool_size_bytes,
      nb::arg("create_if_missing") = true, nb::arg("bucket_count") = PmemOptions().bucket_count,
      nb::arg("max_value_bytes") = PmemOptions().max_value_bytes,
      nb::arg("verify_checksums") = PmemOptions().verify_checksums,
      nb::arg("paranoid_checks") = PmemOptions().paranoid_checks,
      nb::arg("file_mode") = PmemOptions().file_mode,
      nb::arg("huge_pages") = PmemOptions().huge_pages,
      "Open (or create) a persistent pool file (PmemOptions of nvmw/engine.h).\n"
      "path: str, bytes or os.PathLike (a name that is not UTF-8 included).\n"
      "pool_size_bytes: size of a pool this call creates (rounded down to 4 KiB).\n"
      "verify_checksums: check each entry's checksum on every get/exists (CorruptionError\n"
      "  on a mismatch; recovery at open checks every entry regardless).\n"
      "paranoid_checks: refuse to open a pool with any damaged entry (default: quarantine\n"
      "  it: its key raises CorruptionError, the rest of the pool works).\n"
      "file_mode: permission bits of a pool file this call creates (before the umask).");
  m.def(
      "new_memory_engine",
      [](uint32_t shards, uint64_t max_value_bytes) {
        MemoryOptions o;
        o.shards = shards;
        o.max_value_bytes = max_value_bytes;
        auto h = std::make_shared<PyEngine>();
        h->engine = NewMemoryEngine(o);
        return h;
      },
      nb::arg("shards") = MemoryOptions().shards,
      nb::arg("max_value_bytes") = MemoryOptions().max_value_bytes);

  // ---- middleware ----
  nb::module_::import_("atexit").attr("register")(
      nb::cpp_function(&StopAllAtExit, nb::name("_stop_all_middlewares")));
  ::pthread_atfork(nullptr, nullptr, &AfterForkInChild);

  nb::class_<PyMiddleware>(m, "Middleware", "The concurrency-control middleware over an engine.")
      .def(
          "__init__",
          [](PyMiddleware* self, std::shared_ptr<PyEngine> engine, int interactive_threads,
             int batch_threads, int max_threads, double window_s, bool control,
             int no_control_max_inflight, uint64_t batch_threshold_bytes, size_t queue_capacity,
             uint64_t max_value_bytes, int64_t spin_ns, int batch_nice,
             const std::string& execution) {
            if (!engine || !engine->engine)
              ThrowIfError(Status::InvalidArgument("engine is closed or missing"));
            RefuseAfterFork(engine->fork_generation, "Middleware", "engine");
            if (g_exiting) ThrowIfError(Status::Shutdown("the interpreter is exiting"));
            MiddlewareOptions o;
            if (execution == "caller-runs") {
              o.execution = Execution::kCallerRuns;
            } else if (execution == "handoff") {
              o.execution = Execution::kHandOff;
            } else {
              ThrowIfError(Status::InvalidArgument(
                  "execution must be \"caller-runs\" or \"handoff\", got \"" + execution + "\""));
            }
            o.max_threads = max_threads;
            o.window_s = window_s;
            o.control = control;
            o.no_control_max_inflight = no_control_max_inflight;
            o.batch_threshold_bytes = batch_threshold_bytes;
            o.queue_capacity = queue_capacity;
            o.max_value_bytes = max_value_bytes;
            o.spin_ns = spin_ns;
            o.batch_nice = batch_nice;
            std::shared_ptr<MiddlewareBox> box(new MiddlewareBox(engine, o), BoxDeleter());
            Status s = box->mw.Start(engine->engine.get(), interactive_threads, batch_threads);
            ThrowIfError(s);
            std::shared_ptr<Middleware> mw(box, &box->mw);  // shares the box's ownership
            Register(mw);
            new (self) PyMiddleware{std::move(engine), std::move(mw), {}, ForkGeneration()};
          },
          nb::arg("engine"), nb::arg("interactive_threads") = 1, nb::arg("batch_threads") = 1,
          nb::arg("max_threads") = MiddlewareOptions().max_threads,
          nb::arg("window_s") = MiddlewareOptions().window_s,
          nb::arg("control") = MiddlewareOptions().control,
          nb::arg("no_control_max_inflight") = MiddlewareOptions().no_control_max_inflight,
          nb::arg("batch_threshold_bytes") = MiddlewareOptions().batch_threshold_bytes,
          nb::arg("queue_capacity") = MiddlewareOptions().queue_capacity,
          nb::arg("max_value_bytes") = MiddlewareOptions().max_value_bytes,
          nb::arg("spin_ns") = MiddlewareOptions().spin_ns,
          nb::arg("batch_nice") = MiddlewareOptions().batch_nice,
          nb::arg("execution") = "caller-runs")
      .def("stop",
           [](PyMiddleware& self) {
             // Later calls see no middleware (ShutdownError) at once; calls already in
             // flight hold their own reference and end with a result or ShutdownError.
             std::shared_ptr<Middleware> mw = std::move(self.mw);
             self.engine.reset();
             // In a child forked after it was opened, the middleware runs in the parent:
             // only this process's reference goes (BoxDeleter leaves the box alone).
             if (self.fork_generation != ForkGeneration()) return;
             if (!mw) mw = self.closing.lock();  // closed already: wait for that Stop too
             if (!mw) return;
             self.closing = mw;
             if (mw->InCompletion()) {
               // Inside one of its own completion callbacks, which holds a permit until
               // it returns: Stop would wait for itself. Stop on another thread; the
               // drain ends once this callback has returned.
               if (!RunDetached([mw] { (void)mw->Stop(); })) {
                 ThrowIfError(Status::IOError("stop: cannot start a thread to stop the middleware"));
               }
               return;
             }
             // The drain can take long (a queue of puts on an emulated device, a callback
             // that waits): Stop runs on a thread of its own, waited for in slices, so that
             // Ctrl-C raises KeyboardInterrupt at once (it was held until the drain ended).
             // The drain then goes on there; a later close() and the exit hook wait for it.
             // The thread drops its reference before it reports, so that when this call
             // returns normally the box (and the pool) goes with this frame's reference.
             struct Done {
               std::atomic<bool> done{false};
               Status status;
             };
             auto done = std::make_shared<Done>();
             if (RunDetached([mw, done]() mutable {
                   Status s = mw->Stop();
                   mw.reset();
                   done->status = s;
                   done->done.store(true, std::memory_order_release);
                 })) {
               WaitInterruptibly(
                   [&] { return PollFor([&] { return done->done.load(std::memory_order_acquire); }); },
                   nullptr);
               ThrowIfError(done->status);
               return;
             }
             Status s;
             {
               CallWithoutGil release;  // completions of pending requests need the GIL
               s = mw->Stop();
             }
             ThrowIfError(s);
           },
           "Stop accepting, finish every accepted request (their callbacks run), stop the\n"
           "pools and drop this object's reference. Idempotent; later calls raise ShutdownError.\n"
           "Called from one of this middleware's completion callbacks, it returns at once and\n"
           "the drain finishes on another thread after the callback returns. Ctrl-C raises\n"
           "KeyboardInterrupt at once; the drain goes on, and a later call waits for it.\n"
           "Generators and replays still holding the middleware keep its memory, not its service.\n"
           "In a child forked after it was opened, only the child's reference goes.")
      .def_prop_ro("running",
                   [](PyMiddleware& self) {
                     return self.mw && self.fork_generation == ForkGeneration() &&
                            self.mw->running();
                   })
      .def_prop_ro("engine", [](PyMiddleware& self) { return self.engine; })
      .def(
          "get",
          [](PyMiddleware& self, nb::bytes key, int cls) -> nb::object {
            std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "get");
            std::string value;
            Status s;
            {
              CallWithoutGil release;
              s = mw->Get(View(key), &value, ToClass(cls));
            }
            if (s.IsNotFound()) return nb::none();
            ThrowIfError(s);
            return nb::bytes(value.data(), value.size());
          },
          nb::arg("key"), nb::arg("cls") = 2)
      .def(
          "put",
          [](PyMiddleware& self, nb::bytes key, nb::bytes value, int cls) {
            std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "put");
            Status s;
            {
              CallWithoutGil release;
              s = mw->Put(View(key), View(value), ToClass(cls));
            }
            ThrowIfError(s);
          },
          nb::arg("key"), nb::arg("value"), nb::arg("cls") = 2)
      .def(
          "remove",
          [](PyMiddleware& self, nb::bytes key, int cls) {
            std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "remove");
            Status s;
            {
              CallWithoutGil release;
              s = mw->Remove(View(key), ToClass(cls));
            }
            if (s.IsNotFound()) return false;
            ThrowIfError(s);
            return true;
          },
          nb::arg("key"), nb::arg("cls") = 2)
      .def(
          "exists",
          [](PyMiddleware& self, nb::bytes key, int cls) {
            std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "exists");
            Status s;
            {
              CallWithoutGil release;
              s = mw->Exists(View(key), ToClass(cls));
            }
            if (s.IsNotFound()) return false;
            ThrowIfError(s);
            return true;
          },
          nb::arg("key"), nb::arg("cls") = 2,
          "Whether the key exists, without copying its value.")
      .def(
          "submit",
          [](PyMiddleware& self, int op, nb::bytes key, nb::bytes value, int cls,
             nb::callable callback) {
            std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "submit");
            if (op < 0 || op > 3) {
              ThrowIfError(Status::InvalidArgument("op must be 0 (get), 1 (put), 2 (remove) or 3 (exists)"));
            }
            Request r;
            r.op = static_cast<OpType>(op);
            r.key.assign(key.c_str(), key.size());
            r.value.assign(value.c_str(), value.size());
            r.cls = ToClass(cls);
            // This frame's reference outlives Submit, so a refused request's completion
            // (destroyed inside Submit, without the GIL) never drops the last one.
            auto cb = std::make_shared<nb::object>(callback);
            Status s;
            {
              CallWithoutGil release;
              s = mw->Submit(std::move(r), PyCompletion{cb});
            }
            ThrowIfError(s);
          },
          nb::arg("op"), nb::arg("key"), nb::arg("value"), nb::arg("cls"), nb::arg("callback"),
          "Async request; callback(error, value) runs on a worker thread (error is None or\n"
          "an nvmw.errors instance). Every accepted request completes, also when the\n"
          "middleware is closed, collected or the interpreter exits; ShutdownError once closed.\n"
          "The callback may submit() but not make synchronous calls into this middleware\n"
          "(NotSupportedError: it would wait for the permit its own thread holds).")
      .def("get_stats",
           [](PyMiddleware& self) { return StatsToDict(AcquireMiddleware(self, "get_stats")->GetStats()); })
      .def("totals",
           [](PyMiddleware& self) {
             std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "totals");
             nb::dict d;
             const std::pair<const char*, RequestClass> classes[] = {
                 {"interactive", RequestClass::kInteractive},
                 {"batch", RequestClass::kBatch},
                 {"all", RequestClass::kAuto}};
             for (const auto& [name, cls] : classes) {
               const ClassTotals t = mw->Totals(cls);
               nb::dict c;
               c["windows"] = t.windows;
               c["ops"] = t.ops;
               c["errors"] = t.errors;
               c["rejected"] = t.rejected;
               c["latency_s"] = t.latency_s;
               d[name] = c;
             }
             return d;
           })
      .def("get_state",
           [](PyMiddleware& self) {
             State st = AcquireMiddleware(self, "get_state")->GetState();
             return std::vector<double>(st.begin(), st.end());
           })
      .def(
          "wait_for_window",
          [](PyMiddleware& self, uint64_t after_seq, double timeout_s) {
            std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "wait_for_window");
            if (!(timeout_s >= 0)) ThrowIfError(Status::InvalidArgument("timeout_s must be >= 0"));
            WindowStats w;
            Status s;
            // In slices of 50 ms, so that Ctrl-C raises KeyboardInterrupt at once.
            const auto start = std::chrono::steady_clock::now();
            WaitInterruptibly(
                [&] {
                  const double waited =
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                  const double left = std::max(0.0, std::min(timeout_s, 1e7) - waited);
                  s = mw->WaitForWindow(after_seq, std::min(left, 0.05), &w);
                  return !s.IsIOError() || left <= 0.05;  // IOError: this slice timed out
                },
                nullptr);
            ThrowIfError(s);
            return StatsToDict(w);
          },
          nb::arg("after_seq"), nb::arg("timeout_s") = 60.0,
          "Block until a window with seq > after_seq closes (IOError 'timeout' after timeout_s;\n"
          "Ctrl-C raises KeyboardInterrupt).")
      .def("perform_action",
           [](PyMiddleware& self, int action) {
             std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "perform_action");
             Status s;
             {
               CallWithoutGil release;  // resizing may join a retiring worker
               s = mw->PerformAction(action);
             }
             ThrowIfError(s);
           })
      .def("set_threads",
           [](PyMiddleware& self, int interactive, int batch) {
             std::shared_ptr<Middleware> mw = AcquireMiddleware(self, "set_threads");
             Status s;
             {
               CallWithoutGil release;
               s = mw->SetThreads(interactive, batch);
             }
             ThrowIfError(s);
           })
      .def_prop_ro("threads",
                   [](PyMiddleware& self) {
                     int i = 0, b = 0;
                     AcquireMiddleware(self, "threads")->GetThreads(&i, &b);
                     return std::make_pair(i, b);
                   })
      .def("queue_length",
           [](PyMiddleware& self, int cls) {
             return AcquireMiddleware(self, "queue_length")->QueueLength(ToClass(cls));
           })
      .def("classify", [](PyMiddleware& self, int op, size_t value_bytes, int hint) {
        return static_cast<int>(AcquireMiddleware(self, "classify")
                                    ->Classify(static_cast<OpType>(op), value_bytes, ToClass(hint)));
      });
}

}  // namespace nvmw::py
