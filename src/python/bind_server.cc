// Binding of the Redis-protocol server (nvmw/server.h): `_core.Server`. It shares
// ownership of the middleware and the engine it serves, so neither can be freed while
// it runs; start() and stop() release the GIL (the io threads never take it).
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>

#include "nvmw/server.h"
#include "python/bind.h"

namespace nvmw::py {

namespace {

// Members are destroyed in reverse order: the server (which stops) before the
// middleware and the engine it uses.
struct PyServer {
  std::shared_ptr<PyEngine> engine;
  std::shared_ptr<Middleware> mw;
  ServerOptions options;
  std::unique_ptr<Server> server;
  bool started = false;
};

}  // namespace

void BindServer(nb::module_& m) {
  const ServerOptions d;
  nb::class_<PyServer>(m, "Server",
                       "Redis-protocol (RESP2) TCP server in front of a middleware (docs/server.md).")
      .def(
          "__init__",
          [](PyServer* self, PyMiddleware& middleware, std::shared_ptr<PyEngine> engine,
             const std::string& bind, int port, const std::string& password, size_t max_clients,
             uint64_t max_bulk_bytes, size_t max_args, uint64_t max_output_bytes, int io_threads,
             double output_stall_timeout_s, double stop_timeout_s, bool run_on_loop, int batch_io_threads,
             bool batch_io_idle, bool protected_mode, bool group_commit, int group_min_ready,
             int64_t poll_ns) {
            std::shared_ptr<Middleware> mw = AcquireMiddleware(middleware, "Server");
            if (!engine) engine = middleware.engine;  // the engine the middleware runs on
            if (!engine || !engine->engine) {
              ThrowIfError(Status::InvalidArgument("engine is closed or missing"));
            }
            ServerOptions o;
            o.bind = bind;
            o.port = port;
            o.password = password;
            o.max_clients = max_clients;
            o.max_bulk_bytes = max_bulk_bytes;
            o.max_args = max_args;
            o.max_output_bytes = max_output_bytes;
            o.io_threads = io_threads;
            o.output_stall_timeout_s = output_stall_timeout_s;
            o.stop_timeout_s = stop_timeout_s;
            o.run_on_loop = run_on_loop;
            o.batch_io_threads = batch_io_threads;
            o.batch_io_idle = batch_io_idle;
            o.protected_mode = protected_mode;
            o.group_commit = group_commit;
            o.group_min_ready = group_min_ready;
            o.poll_ns = poll_ns;
            new (self) PyServer{std::move(engine), std::move(mw), o, std::make_unique<Server>(), false};
          },
          nb::arg("middleware"), nb::arg("engine").none() = nb::none(), nb::arg("bind") = d.bind, nb::arg("port") = 0,
          nb::arg("password") = d.password, nb::arg("max_clients") = d.max_clients,
          nb::arg("max_bulk_bytes") = d.max_bulk_bytes, nb::arg("max_args") = d.max_args,
          nb::arg("max_output_bytes") = d.max_output_bytes, nb::arg("io_threads") = d.io_threads,
          nb::arg("output_stall_timeout_s") = d.output_stall_timeout_s,
          nb::arg("stop_timeout_s") = d.stop_timeout_s, nb::arg("run_on_loop") = d.run_on_loop,
          nb::arg("batch_io_threads") = d.batch_io_threads, nb::arg("batch_io_idle") = d.batch_io_idle,
          nb::arg("protected_mode") = d.protected_mode, nb::arg("group_commit") = d.group_commit,
          nb::arg("group_min_ready") = d.group_min_ready, nb::arg("poll_ns") = d.poll_ns,
          "A server over `middleware` (a _core.Middleware) and the _core.Engine it runs on\n"
          "(None: the middleware's own, `middleware.engine`).\n"
          "port=0 picks a free port (read .port after start()). run_on_loop=False hands every\n"
          "request to the workers of its class (see ServerOptions::run_on_loop).\n"
          "batch_io_threads: loops of their own for connections sending large values\n"
          "(ServerOptions::batch_io_threads); batch_io_idle runs them under SCHED_IDLE.\n"
          "protected_mode (Redis's protected-mode, default on): without a password, a client\n"
          "not on loopback gets one -DENIED line and is closed (ServerOptions::protected_mode).\n"
          "group_commit (default on): the SETs of one loop turn that began with at least\n"
          "group_min_ready ready connections are made durable together\n"
          "(ServerOptions::group_commit, group_min_ready).\n"
          "poll_ns (default 0): after a turn with work, an interactive loop polls this long\n"
          "before it sleeps while the machine has a core to spare (ServerOptions::poll_ns).")
      .def("start",
           [](PyServer& self) {
             if (self.started) ThrowIfError(Status::InvalidArgument("server already started"));
             Status s;
             {
               nb::gil_scoped_release release;
               s = self.server->Start(self.mw.get(), self.engine->engine.get(), self.options);
             }
             ThrowIfError(s);
             self.started = true;
           },
           "Bind, listen and start the io threads (StorageIOError when the address is taken).")
      .def_prop_ro("port", [](PyServer& self) { return self.server->port(); },
                   "The port listened on (the actual one when 0 was asked); 0 before start().")
      .def_prop_ro("max_clients", [](PyServer& self) { return self.server->max_clients(); },
                   "The client cap in effect: max_clients, or less when the open-file limit\n"
                   "leaves room for fewer clients (Server::max_clients); 0 before start().")
      .def("stop",
           [](PyServer& self) {
             Status s;
             {
               nb::gil_scoped_release release;
               s = self.server->Stop();
             }
             ThrowIfError(s);
           },
           "Graceful stop: stop accepting, finish commands in flight, flush their replies\n"
           "(bounded by stop_timeout_s), close every connection. Idempotent.")
      .def("stats",
           [](PyServer& self) {
             const ServerStats st = self.server->Stats();
             nb::dict out;
             out["connections_current"] = st.connections_current;
             out["connections_total"] = st.connections_total;
             out["rejected_connections"] = st.rejected_connections;
             out["commands"] = st.commands;
             out["protocol_errors"] = st.protocol_errors;
             out["auth_failures"] = st.auth_failures;
             out["output_buffer_closes"] = st.output_buffer_closes;
             out["output_peak_bytes"] = st.output_peak_bytes;
             out["batch_moves"] = st.batch_moves;
             out["group_commits"] = st.group_commits;
             out["grouped_sets"] = st.grouped_sets;
             out["polled_turns"] = st.polled_turns;
             return out;
           },
           "Counters since start(): connections_current, connections_total,\n"
           "rejected_connections, commands, protocol_errors, auth_failures, output_buffer_closes,\n"
           "batch_moves; group_commits and grouped_sets, the groups of two or more SETs handed\n"
           "over together and the SETs in them; polled_turns, the loop turns whose work was\n"
           "found by polling (poll_ns); output_peak_bytes, the most reply bytes one\n"
           "connection has held at once.");
}

}  // namespace nvmw::py
