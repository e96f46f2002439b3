// The Redis-protocol server's internal state (Server::Impl), shared by server.cc (event
// loops, sockets, output, lifecycle) and commands.cc (the command table and the
// execution of key commands through the middleware). docs/server.md explains the design.
#ifndef NVMW_SERVER_SERVER_IMPL_H_
#define NVMW_SERVER_SERVER_IMPL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nvmw/server.h"
#include "server/resp.h"

namespace nvmw {

struct IoThread;

// The io thread running on this thread (null elsewhere, e.g. on middleware workers).
extern thread_local IoThread* t_current_io;

// Group commit (ServerOptions::group_commit): a gathered group is run as soon as it has
// kGroupRunAt requests, mid-turn, so that the first replies of a long turn do not wait
// for its last reads.
inline constexpr size_t kGroupRunAt = 8;

// One reply piece waiting to be written. Small replies share a piece (`sealed` false:
// more may be appended); a value read from the engine travels as its own piece, moved,
// never copied into a buffer, and is written with writev.
struct OutPiece {
  std::string data;
  bool sealed = false;
};

// A key command being executed: its sub-requests (one per key) go to the middleware one
// after the other; each result is folded in until the reply can be built.
//
// MGET holds its values until the reply is built whole at the end, unless the values
// held and the connection's queued output reach max_output_bytes: then the array header
// and the values held so far are queued (`streaming`) and the command pauses between two
// keys (pending set, nothing in flight) until the client has read the output below the
// cap. So at most max_output_bytes plus one value is held for a connection.
struct PendingCommand {
  enum class Kind : uint8_t { kGet, kSet, kDel, kExists, kMget, kMset };
  Kind kind = Kind::kGet;
  std::vector<std::string> args;  // the command's arguments (args[0] is the name)
  size_t next = 0;                // next sub-request: index into the keys
  size_t total = 0;               // number of sub-requests
  int64_t count = 0;              // DEL / EXISTS: keys found
  std::vector<std::string> values;  // MGET: values (moved from the middleware)
  std::vector<uint8_t> found;       // MGET: whether each key exists
  std::string error;                // first error: the reply (see error_at for MGET)
  size_t error_at = 0;              // the key whose sub-request failed (error set)
  bool streaming = false;           // MGET: the array header is queued
  size_t sent = 0;                  // MGET: values [0, sent) are queued
  uint64_t held = 0;                // MGET: bytes of values [sent, next), read, not queued

  // Ready for the next command: every field as new, the vectors' capacity kept for
  // ordinary commands (at most kKeepSlots keys), so a connection's GETs and SETs
  // allocate no command state (Conn::spare).
  static constexpr size_t kKeepSlots = 64;
  void Reset() {
    kind = Kind::kGet;
    next = total = 0;
    count = 0;
    error.clear();
    error_at = 0;
    streaming = false;
    sent = 0;
    held = 0;
    if (args.capacity() > kKeepSlots) {
      std::vector<std::string>().swap(args);
      std::vector<std::string>().swap(values);
      std::vector<uint8_t>().swap(found);
    } else {
      args.clear();
      values.clear();
      found.clear();
    }
  }
};

struct Conn {
  int fd = -1;
  uint64_t id = 0;
  IoThread* io = nullptr;
  resp::Parser parser;
  std::string in;        // bytes read, not yet parsed from in_pos on
  size_t in_pos = 0;
  std::deque<OutPiece> out;
  size_t out_off = 0;    // bytes of out.front() already written
  uint64_t out_bytes = 0;  // pending output, all pieces
  uint32_t events = 0;   // epoll interest registered now
  bool authed = true;
  bool close_after_write = false;  // QUIT or protocol error: close once flushed
  // Flushed after QUIT or a protocol error: the write side is shut down (FIN after the
  // replies) and what the client still sends is read and dropped until it closes too or
  // linger_until_ns passes (see Server::Impl::Linger).
  bool lingering = false;
  int64_t linger_until_ns = 0;
  bool closed = false;   // fd closed; freed once no request is in flight
  bool peer_gone = false;
  RequestClass cls = RequestClass::kAuto;
  bool resp3 = false;    // HELLO 3: RESP3 nulls and maps in replies
  std::string name;      // CLIENT SETNAME
  int64_t stalled_since_ns = 0;  // output at the cap, no write progress since (0: not)

  // The command in flight, if any. While set, no further command is parsed. Set with
  // nothing in flight: an MGET paused at the output cap (Flush resumes it).
  std::unique_ptr<PendingCommand> pending;
  // The last finished command's state, reset, for the next one (one allocation per
  // connection, not one per command).
  std::unique_ptr<PendingCommand> spare;
  bool in_flight = false;  // a sub-request is with the middleware (set by the loop only)
  // Result of the last sub-request, written by its completion (inline on the loop, or on
  // a worker before the connection is posted to the loop's mailbox).
  Status result_status;
  std::string result_value;
  bool result_inline = false;  // the completion ran on this loop, inside SubmitOrRun
  // Its SET waits in the loop's group commit (IoThread::puts), run at the end of the turn.
  bool in_group = false;
  // Set while the connection waits, between two commands, to be moved to this loop (a
  // batch loop, or back); no command runs and nothing is read meanwhile.
  IoThread* move_to = nullptr;

  explicit Conn(const resp::ParserLimits& limits) : parser(limits) {}
};

struct IoThread {
  Server::Impl* server = nullptr;
  int index = 0;
  int epfd = -1;
  int evfd = -1;  // wakes the loop: completions from workers, Stop
  std::thread thread;
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // loop thread only
  std::vector<std::unique_ptr<Conn>> zombies;  // closed, a request still in flight
  std::vector<std::unique_ptr<Conn>>* graveyard = nullptr;  // freed after this iteration
  std::mutex mailbox_mu;
  std::vector<Conn*> mailbox;  // connections whose sub-request completed on a worker
  std::atomic<int> in_flight{0};  // connections with a sub-request at the middleware
  // Out of file descriptors: the listening socket is left out of this loop's epoll for a
  // tick (it would report readiness in a busy loop while accept fails).
  bool accept_paused = false;   // loop thread only
  int64_t accept_resume_ns = 0;
  bool batch = false;  // a loop of batch connections (ServerOptions::batch_io_threads)
  // Connections handed over by another loop (under mailbox_mu); `adopt_closed` once
  // this loop has ended, after which nothing more is handed to it.
  std::vector<std::unique_ptr<Conn>> adopt;
  bool adopt_closed = false;
  std::vector<Conn*> to_move;  // connections with move_to set, moved at the end of the turn
  // Group commit (ServerOptions::group_commit): the SETs read this turn and their
  // connections, and the buffers of the group being committed (kept for their capacity).
  std::vector<Request> puts;
  std::vector<Conn*> put_conns;
  int turn_events = 0;  // what this turn's epoll_wait returned
  std::vector<Request> committing;
  std::vector<Conn*> committing_conns;
  std::vector<Completion> committing_done;
  std::vector<Status> committing_accepted;
};

struct Server::Impl {
  Middleware* mw = nullptr;
  Engine* engine = nullptr;
  ServerOptions options;
  resp::ParserLimits limits;
  std::mutex lifecycle_mu;  // serializes Start and Stop (Stop may come from any thread)
  int listen_fd = -1;
  std::atomic<int> port{0};
  std::atomic<size_t> max_clients{0};  // options.max_clients as Start left it (Server::max_clients)
  int64_t start_ns = 0;
  bool started = false;  // guarded by lifecycle_mu
  std::vector<std::unique_ptr<IoThread>> threads;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_conn_id{1};

  std::atomic<uint64_t> connections_current{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> commands{0};
  std::atomic<uint64_t> keyspace_hits{0};    // keys GET, MGET and EXISTS found
  std::atomic<uint64_t> keyspace_misses{0};  // and did not find
  // INFO's instantaneous_ops_per_sec: (time, commands) as recent INFO calls saw them.
  std::mutex ops_samples_mu;
  std::deque<std::pair<int64_t, uint64_t>> ops_samples;
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> auth_failures{0};
  std::atomic<uint64_t> output_buffer_closes{0};
  std::atomic<uint64_t> output_peak_bytes{0};  // most reply bytes one connection held at once
  std::atomic<uint64_t> batch_moves{0};
  std::atomic<uint64_t> group_commits{0};
  std::atomic<uint64_t> grouped_sets{0};
  std::atomic<uint64_t> polled_turns{0};
  std::atomic<uint64_t> next_batch_loop{0};
  std::atomic<uint64_t> next_inter_loop{0};

  // ---- server.cc ----
  Status Start(Middleware* m, Engine* e, const ServerOptions& o);
  Status Stop();
  Status StartLocked(Middleware* m, Engine* e, const ServerOptions& o);
  Status StopLocked();
  void Loop(IoThread* io);
  void Accept(IoThread* io);
  void OnReadable(IoThread* io, Conn* c);
  void OnWritable(IoThread* io, Conn* c);
  // Parses and runs commands from the input buffer while the connection may.
  void ProcessInput(IoThread* io, Conn* c);
  // Writes what it can, resumes a command paused at the output cap once the output is
  // below it, then runs the commands already read; closes the connection on a write
  // error or when done after QUIT.
  void Flush(IoThread* io, Conn* c);
  // Raises output_peak_bytes to the reply bytes the connection holds now (queued output
  // and the values of an MGET not queued yet).
  void NoteOutputPeak(const Conn* c);
  // Registers the epoll interest the connection's state calls for.
  void UpdateInterest(IoThread* io, Conn* c);
  void Close(IoThread* io, Conn* c);
  void Linger(IoThread* io, Conn* c);
  void DrainMailbox(IoThread* io);
  // A connection's sub-request came back (its result is in the connection): take it in
  // and go on with the command and the input behind it.
  void Resume(IoThread* io, Conn* c);
  // Whether this turn of the loop gathers (ServerOptions::group_commit, group_min_ready).
  bool Gathering(const IoThread* io) const {
    return options.group_commit && io->turn_events >= options.group_min_ready;
  }
  // The end of a loop turn (ServerOptions::group_commit): the SETs gathered this turn,
  // made durable together, then those that the commands behind them add, until none is
  // left.
  void EndTurn(IoThread* io);
  // Commits the SETs gathered so far as one group and resumes their connections.
  void CommitPuts(IoThread* io);
  // The completion of a connection's sub-request (Continue, CommitPuts).
  static Completion CompletionFor(Conn* c);
  void CheckStalls(IoThread* io, int64_t now_ns);
  // Batch loops: asks for the connection to be moved to a loop of the other kind
  // (batch: true, a batch loop) once its current command is done; no-op without batch
  // loops, while stopping, or when it is on such a loop already.
  void RequestMove(IoThread* io, Conn* c, bool batch);
  // Moves the connections of io->to_move (end of a loop turn).
  void MoveConns(IoThread* io);
  // Takes the connections handed to this loop and serves them.
  void AdoptConns(IoThread* io);
  // Whether the connection sending this argument should be moved to a batch loop.
  bool ShouldMoveToBatch(const IoThread* io, const Conn* c) const;
  static void Wake(IoThread* io);
  // Whether the connection may run its next command (read already), and be read.
  bool MayParse(const Conn* c) const;
  bool MayRead(const Conn* c) const;
  // Parses and runs commands from data[0, n) while the connection may; returns the bytes used.
  size_t ParseFrom(IoThread* io, Conn* c, const char* data, size_t n);
  // From a worker: hands the connection back to its loop (mailbox, eventfd).
  static void Post(Conn* c);
  // Output: small replies are appended to the last unsealed piece (Reply gives it);
  // Send counts what fn appends into the pending output.
  static std::string* Reply(Conn* c);
  template <typename F>
  static void Send(Conn* c, F&& fn) {
    std::string* s = Reply(c);
    const size_t before = s->size();
    fn(s);
    c->out_bytes += s->size() - before;
  }
  // A whole owned buffer as its own piece (a value moved from the middleware).
  static void AddOwnedPiece(Conn* c, std::string&& data);
  // A bulk reply of a value: small ones are copied into the shared piece, large ones
  // keep their own buffer.
  static void SendValue(Conn* c, std::string&& value);

  // ---- commands.cc ----
  // Runs one parsed command (args non-empty). Key commands may leave c->pending set.
  void Execute(IoThread* io, Conn* c, std::vector<std::string>& args);
  // Advances c->pending: submits sub-requests until one goes to a worker (returns with
  // c->in_flight set), an MGET reaches the output cap (queues what it read and returns
  // paused: pending set, nothing in flight) or all are done (builds the reply, clears
  // pending).
  void Continue(IoThread* io, Conn* c);
  // Folds the last sub-request's result into c->pending.
  void Absorb(Conn* c);
  void FinishPending(Conn* c);
  // Adds a finished GET's, MGET's or EXISTS's keys to keyspace_hits and keyspace_misses.
  void CountLookups(const PendingCommand& p);
  // Commands per second since the latest INFO at least a second ago (since the start for
  // the first INFO); records this call's sample.
  uint64_t InstantaneousOpsPerSec();
  // MGET: queues the array header (once) and the values [p.sent, end).
  static void QueueValues(Conn* c, PendingCommand& p, size_t end);
  std::string Info(const std::vector<std::string>& args);
  std::string StatsJson();
  bool IsStopping() const { return stopping.load(std::memory_order_acquire); }
};

}  // namespace nvmw

#endif  // NVMW_SERVER_SERVER_IMPL_H_
