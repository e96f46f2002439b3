// Server: a Redis-protocol (RESP2) TCP front end of the middleware (docs/server.md).
//
// Clients speak the Redis protocol (redis-cli, redis-py, redis-benchmark, twemproxy);
// each GET/SET/DEL/EXISTS/MGET/MSET becomes middleware requests of the connection's
// class (NVMW.CLASS; by default the middleware's size rule). An epoll event loop per io
// thread (one by default) reads, parses and answers every connection; it never waits
// for a permit: a request whose class has a free permit runs on the io thread
// (caller-runs, Middleware::SubmitOrRun), one that has to wait is run later by a worker
// of its class, and its reply is posted back to the loop. A connection with a command in
// flight parses no further command until it completes, so replies keep request order;
// other connections go on. A connection that starts sending a large value (or says
// NVMW.CLASS batch) is moved to a batch loop of its own (batch_io_threads), so the loop
// of interactive connections never receives large values. A SET is acknowledged once
// the engine's Put returned OK (durable on the pmem engine).
//
// Thread safety: every method may be called from any thread (Start and Stop are
// serialized; a second Stop waits for the first).
// Ownership: neither the middleware nor the engine is owned; both must outlive Stop()
// (the destructor calls Stop()).
#ifndef NVMW_SERVER_H_
#define NVMW_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "nvmw/status.h"

namespace nvmw {

struct ServerOptions {
  // Address to listen on (IPv4 or IPv6 literal). The loopback default keeps the server
  // private to the machine; bind "0.0.0.0" only with a password on a trusted network.
  std::string bind = "127.0.0.1";
  // TCP port; 0 picks a free ephemeral port (read it back with port()).
  int port = 6379;
  // When not empty, every connection must AUTH with it first (-NOAUTH otherwise).
  std::string password;
  // Protected mode (Redis's protected-mode, on by default as there): with no password,
  // a connection from an address other than loopback (127.0.0.0/8, ::1, ::ffff:127.x)
  // is answered one "-DENIED ..." line saying how to open the server and closed
  // (counted in rejected_connections), whatever the bind address. Loopback clients are
  // served. No effect when a password is set.
  bool protected_mode = true;
  // Connections open at once; one more is answered "-ERR max number of clients
  // reached" and closed (Redis's maxclients default). As Redis does, Start lowers it
  // to what the open-file limit (RLIMIT_NOFILE) leaves room for, beside the descriptors
  // open at Start, the loops' and 32 more; max_clients() tells the cap in effect.
  size_t max_clients = 10000;
  // Largest argument ($<len>) accepted; a larger one is a protocol error (Redis's
  // proto-max-bulk-len default, 512 MB).
  uint64_t max_bulk_bytes = 512ull << 20;
  // Most arguments in one command (*<n>); more is a protocol error.
  size_t max_args = 1 << 20;
  // Replies pending on one connection before it stops being read (a client that sends
  // but does not read cannot make the server buffer without bound). An MGET at the cap
  // pauses between two keys until the client has read below it, so it holds at most
  // this plus one value.
  uint64_t max_output_bytes = 64ull << 20;
  // A connection whose pending output stays at or above max_output_bytes this long
  // without the client reading any of it is closed (counted in output_buffer_closes).
  // Infinity, or any timeout past what the clock counts (about 292 years), is never reached.
  double output_stall_timeout_s = 30.0;
  // Event-loop threads; connections are spread over them as they are accepted.
  int io_threads = 1;
  // Event-loop threads of their own for batch connections (0: none). A connection that
  // starts sending an argument of at least the middleware's batch_threshold_bytes (an
  // 800 KB SET value) while its class is batch or auto, or that sends NVMW.CLASS batch,
  // is moved to one of these loops between two commands and stays there (NVMW.CLASS
  // interactive moves it back): the loops of interactive connections then never spend
  // their turn receiving large values. These loops accept no connections.
  int batch_io_threads = 1;
  // Run the batch loops under SCHED_IDLE (Linux): they get a core only when no thread
  // of normal priority wants it, so the receive of large values yields to the
  // interactive loops and clients. Needs no privilege.
  bool batch_io_idle = true;
  // true: an interactive request whose class has a free permit runs on the io thread
  // (caller-runs: no hand-off, the cheapest path for small requests, but the server then
  // has at most io_threads interactive requests of its own in the engine, whatever the
  // class's limit). false: every request is run by a worker of its class, so the
  // classes' limits bound the server's concurrency (each request pays a hand-off).
  // Batch requests always go to the workers. No-control mode always runs on the loop.
  bool run_on_loop = true;
  // Group commit: the single-key SETs that an io thread would run itself during one turn
  // of its loop (one epoll_wait's worth of ready connections) are made durable together
  // at the end of the turn, under one permit, through Engine::PutMany (on the pmem
  // engine one drain and one redo-logged publish per group of up to kPutGroupMax keys
  // instead of one per key), and each is answered once its group is durable. A SET's
  // reply then waits for the others read in the same turn (Redis too writes a turn's
  // replies at its end). false: each SET is made durable alone, as it is read.
  bool group_commit = true;
  // Group commit gathers only in a turn that began with at least this many ready
  // descriptors (1..256, what one epoll_wait takes): with fewer the loop is not busy, and holding replies to the
  // turn's end would leave it idle while the clients wait for them. Measured with
  // redis-benchmark (128 B SETs, pmem pool on /dev/shm, servers side by side, 2 vCPUs):
  // at 4 clients gathering in every turn gave 54-120 k SETs/s against 92-107 k without;
  // at 10 clients 4 and 8 were within the rounds' spread; at 50 both were ahead of no
  // gathering (133-142 k against 92-128 k SETs/s) in all rounds but one.
  int group_min_ready = 8;
  // Poll instead of sleeping: after a turn that had work, an interactive loop keeps
  // asking epoll for ready connections (without blocking) for up to this many
  // nanoseconds before it sleeps, but only while the machine leaves a core for it
  // (Middleware::CoreToSpare: the middleware's busy threads and the machine's other
  // runnable threads, the loop among them, sampled every few milliseconds, at most the
  // cores). A client
  // whose request finds the loop asleep pays for waking it (on a VM an inter-processor
  // interrupt, a few microseconds of the client's own CPU per request); polling spares
  // it. 0 (the default) never polls: a server that shares the machine gives back every
  // idle moment. At most 1 s.
  int64_t poll_ns = 0;
  // Stop(): how long replies may take to reach slow readers before their
  // connections are closed anyway (commands in flight always finish first). Infinity:
  // Stop waits for every reader.
  double stop_timeout_s = 10.0;
};

struct ServerStats {
  uint64_t connections_current = 0;   // open connections
  uint64_t connections_total = 0;     // accepted since Start (rejected ones excluded)
  uint64_t rejected_connections = 0;  // refused: max_clients reached, or protected mode
  uint64_t commands = 0;              // commands executed (errors included)
  uint64_t protocol_errors = 0;       // connections closed for malformed input
  uint64_t auth_failures = 0;         // AUTH/HELLO with a wrong password
  uint64_t output_buffer_closes = 0;  // connections closed for not reading their replies
  // The most reply bytes one connection has held at once: its queued output plus the
  // values an MGET has read and not queued yet. Below max_output_bytes plus one
  // command's reply, or plus one value for an MGET (which pauses at the cap).
  uint64_t output_peak_bytes = 0;
  uint64_t batch_moves = 0;           // connections moved to a batch loop (batch_io_threads)
  uint64_t group_commits = 0;         // groups of two or more SETs run together under one permit (group_commit)
  uint64_t grouped_sets = 0;          // the SETs in those groups
  uint64_t polled_turns = 0;          // loop turns whose work was found by polling (poll_ns)
};

class Server {
 public:
  Server();
  ~Server();  // calls Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the io threads. `mw` must be started; `engine` is the
  // engine it runs on (DBSIZE and INFO's key count read it directly). InvalidArgument
  // for bad options, IOError when the address cannot be bound.
  Status Start(Middleware* mw, Engine* engine, const ServerOptions& options);
  // The port listened on (the actual one when options.port was 0); 0 before Start.
  int port() const;
  // The client cap in effect: options.max_clients, or less when the open-file limit
  // leaves room for fewer clients (see ServerOptions::max_clients); 0 before Start.
  size_t max_clients() const;
  // Graceful: stops accepting, lets commands in flight finish, flushes their replies
  // (bounded by stop_timeout_s), closes every connection and joins the io threads.
  // Idempotent.
  Status Stop();
  ServerStats Stats() const;

  struct Impl;  // src/server/server_impl.h

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvmw

#endif  // NVMW_SERVER_H_
