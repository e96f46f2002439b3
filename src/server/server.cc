// The Redis-protocol server's event loops: listening, accepting (protected mode, client
// cap), reading and parsing (resp.h), writing replies with sendmsg/iovec straight from
// the pieces they are in (a value read from the engine is written from its own buffer),
// the output cap, the mailbox through which workers hand back completed requests, and
// the graceful Stop.
// docs/server.md ("Design") describes the threads and the execution path.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "server/server_impl.h"
#include "util/clock.h"

namespace nvmw {

namespace {

// epoll data tags besides connections: the listening socket (the io thread's own
// pointer tags its eventfd).
char g_listen_tag;

constexpr size_t kReadChunk = 64 * 1024;  // bytes read per read() call
constexpr int kReadsPerEvent = 4;         // reads per readiness event (fairness)
constexpr int kAcceptsPerEvent = 64;
constexpr int kMaxIov = 64;
constexpr int kMaxEvents = 256;  // ready descriptors taken per epoll_wait
constexpr size_t kPieceBytes = 16 * 1024;  // small replies share a piece up to this size
constexpr int kLoopTickMs = 100;            // stall checks and Stop progress
constexpr int64_t kMaxPollNs = 1000000000;  // ServerOptions::poll_ns: at most 1 s
constexpr int64_t kLingerNs = 2000000000;   // Linger: how long a closing client may keep sending

thread_local char t_read_buf[kReadChunk];

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// A timeout in seconds as nanoseconds, saturating: one too long for the clock (infinity
// included) is INT64_MAX, never reached. (A plain conversion of such a value is undefined
// and gives INT64_MIN on x86-64, a timeout that had always passed.)
int64_t TimeoutNs(double seconds) {
  const double ns = seconds * 1e9;
  return ns >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(ns);
}

// now + the timeout, saturating at INT64_MAX.
int64_t DeadlineNs(int64_t now_ns, double seconds) {
  const int64_t ns = TimeoutNs(seconds);
  return ns > INT64_MAX - now_ns ? INT64_MAX : now_ns + ns;
}

// Whether a peer address is loopback: 127.0.0.0/8, ::1, or 127.0.0.0/8 mapped into
// IPv6 (::ffff:127.x.y.z, an IPv4 client of a socket bound to "::").
bool IsLoopbackPeer(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

// Descriptors kept for the process besides client connections, on top of those open
// at Start and the loops' own (Redis's CONFIG_MIN_RESERVED_FDS): files opened later, the
// monitor's reads of /proc, a metrics endpoint's connections.
constexpr uint64_t kReservedFds = 32;

// Descriptors the process has open now (0 when /proc/self/fd cannot be read).
uint64_t OpenDescriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  uint64_t n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // the directory's own descriptor
}

// The most clients the open-file limit leaves room for, as Redis lowers maxclients to
// it: past it accept() fails and a client would wait unanswered in the backlog instead
// of being told the server is full. `loop_fds`: the descriptors the loops will open.
uint64_t ClientRoom(uint64_t loop_fds) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  const uint64_t taken = OpenDescriptors() + loop_fds + kReservedFds;
  return rl.rlim_cur > taken ? rl.rlim_cur - taken : 1;
}

// Protected mode's answer to a client on another host (Redis sends its own -DENIED
// before closing, and so do we: the client learns why and what to change).
const char kDeniedMsg[] =
    "-DENIED nvmw is running in protected mode because no password is set: only clients "
    "on the loopback interface are served. To fix it, do one of these: 1) set a password "
    "(nvmw serve --password, or $NVMW_PASSWORD) and AUTH with it; 2) if only clients on "
    "the server's own host need it, bind it to loopback (--bind 127.0.0.1) and connect "
    "there; 3) restart it with --protected-mode no, only on a trusted network: any host "
    "that reaches the port can then read and write the store.\r\n";

}  // namespace

thread_local IoThread* t_current_io = nullptr;

// ---- output ----

std::string* Server::Impl::Reply(Conn* c) {
  if (c->out.empty() || c->out.back().sealed || c->out.back().data.size() >= kPieceBytes) {
    c->out.emplace_back();
  }
  return &c->out.back().data;
}

void Server::Impl::AddOwnedPiece(Conn* c, std::string&& data) {
  if (data.empty()) return;
  c->out_bytes += data.size();
  c->out.push_back(OutPiece{std::move(data), true});
}

void Server::Impl::SendValue(Conn* c, std::string&& value) {
  if (value.size() < kPieceBytes) {
    Send(c, [&](std::string* out) { resp::AppendBulk(out, value); });
    return;
  }
  Send(c, [&](std::string* out) { resp::AppendBulkHeader(out, value.size()); });
  AddOwnedPiece(c, std::move(value));
  Send(c, [&](std::string* out) { out->append("\r\n", 2); });
}

// ---- lifecycle ----

Status Server::Impl::Start(Middleware* m, Engine* e, const ServerOptions& o) {
  std::lock_guard<std::mutex> lock(lifecycle_mu);
  return StartLocked(m, e, o);
}

Status Server::Impl::Stop() {
  std::lock_guard<std::mutex> lock(lifecycle_mu);
  return StopLocked();
}

Status Server::Impl::StartLocked(Middleware* m, Engine* e, const ServerOptions& o) {
  if (started) return Status::InvalidArgument("server already started");
  if (m == nullptr || e == nullptr) return Status::InvalidArgument("server needs a middleware and its engine");
  if (!m->running()) return Status::InvalidArgument("the middleware is not running");
  if (o.port < 0 || o.port > 65535) {
    return Status::InvalidArgument("port must be in [0, 65535], got " + std::to_string(o.port));
  }
  if (o.max_clients < 1) return Status::InvalidArgument("max_clients must be >= 1");
  if (o.max_bulk_bytes < 1) return Status::InvalidArgument("max_bulk_bytes must be >= 1");
  if (o.max_args < 1) return Status::InvalidArgument("max_args must be >= 1");
  if (o.max_output_bytes < 1) return Status::InvalidArgument("max_output_bytes must be >= 1");
  if (o.io_threads < 1 || o.io_threads > 64) {
    return Status::InvalidArgument("io_threads must be in [1, 64], got " + std::to_string(o.io_threads));
  }
  if (o.batch_io_threads < 0 || o.batch_io_threads > 64) {
    return Status::InvalidArgument("batch_io_threads must be in [0, 64], got " +
                                   std::to_string(o.batch_io_threads));
  }
  if (o.poll_ns < 0 || o.poll_ns > kMaxPollNs) {
    return Status::InvalidArgument("poll_ns must be in [0, " + std::to_string(kMaxPollNs) + "], got " +
                                   std::to_string(o.poll_ns));
  }
  if (o.group_min_ready < 1 || o.group_min_ready > kMaxEvents) {
    return Status::InvalidArgument("group_min_ready must be in [1, " + std::to_string(kMaxEvents) +
                                   "], got " + std::to_string(o.group_min_ready));
  }
  if (!(o.output_stall_timeout_s > 0) || !(o.stop_timeout_s >= 0)) {
    return Status::InvalidArgument("output_stall_timeout_s must be > 0 and stop_timeout_s >= 0");
  }
  mw = m;
  engine = e;
  options = o;
  // Two descriptors per loop (epoll, eventfd) and the listening socket.
  options.max_clients = static_cast<size_t>(std::min<uint64_t>(
      o.max_clients, ClientRoom(2 * static_cast<uint64_t>(o.io_threads + o.batch_io_threads) + 1)));
  max_clients = options.max_clients;
  limits.max_bulk_bytes = o.max_bulk_bytes;
  limits.max_args = o.max_args;

  std::string host = o.bind == "localhost" ? "127.0.0.1" : o.bind;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  int family = AF_INET;
  {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
    if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
      a4->sin_family = AF_INET;
      a4->sin_port = htons(static_cast<uint16_t>(o.port));
      addr_len = sizeof(sockaddr_in);
    } else if (inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
      family = AF_INET6;
      a6->sin6_family = AF_INET6;
      a6->sin6_port = htons(static_cast<uint16_t>(o.port));
      addr_len = sizeof(sockaddr_in6);
    } else {
      return Status::InvalidArgument("bind must be an IPv4 or IPv6 address, got \"" + o.bind + "\"");
    }
  }
  listen_fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return Status::IOError(Errno("socket"));
  int one = 1;
  ::setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
    Status s = Status::IOError(Errno(("bind " + o.bind + ":" + std::to_string(o.port)).c_str()));
    ::close(listen_fd);
    listen_fd = -1;
    return s;
  }
  if (::listen(listen_fd, 511) != 0) {
    Status s = Status::IOError(Errno("listen"));
    ::close(listen_fd);
    listen_fd = -1;
    return s;
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                 : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);

  start_ns = NowNs();
  stopping.store(false);
  Status s;
  // Loops [0, io_threads) accept and serve connections; the batch loops after them
  // serve the connections moved to them.
  for (int i = 0; i < o.io_threads + o.batch_io_threads && s.ok(); ++i) {
    auto io = std::make_unique<IoThread>();
    io->server = this;
    io->index = i;
    io->batch = i >= o.io_threads;
    io->epfd = ::epoll_create1(EPOLL_CLOEXEC);
    io->evfd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (io->epfd < 0 || io->evfd < 0) {
      s = Status::IOError(Errno("epoll/eventfd"));
    } else {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = io.get();
      ::epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->evfd, &ev);
      // Every accepting loop watches the listening socket; EPOLLEXCLUSIVE wakes one of them per
      // connection, which accepts it and owns it from then on.
      ev.events = EPOLLIN | (o.io_threads > 1 ? static_cast<uint32_t>(EPOLLEXCLUSIVE) : 0u);
      ev.data.ptr = &g_listen_tag;
      if (!io->batch && ::epoll_ctl(io->epfd, EPOLL_CTL_ADD, listen_fd, &ev) != 0) {
        s = Status::IOError(Errno("epoll_ctl"));
      }
    }
    threads.push_back(std::move(io));
  }
  if (s.ok()) {
    for (auto& io : threads) {
      try {
        io->thread = std::thread(&Impl::Loop, this, io.get());
      } catch (const std::system_error& e) {
        s = Status::IOError(std::string("cannot start an io thread: ") + e.what());
        break;
      }
    }
  }
  started = true;
  if (!s.ok()) {
    StopLocked();
    return s;
  }
  return Status::OK();
}

Status Server::Impl::StopLocked() {
  if (!started) return Status::OK();
  started = false;
  stopping.store(true, std::memory_order_release);
  // Refuse new connections at once (the loops deregister the socket when they see
  // `stopping`; it is closed after they are joined).
  if (listen_fd >= 0) ::shutdown(listen_fd, SHUT_RDWR);
  for (auto& io : threads) {
    if (io->evfd >= 0) Wake(io.get());
  }
  for (auto& io : threads) {
    if (io->thread.joinable()) io->thread.join();
  }
  for (auto& io : threads) {
    for (auto& [fd, c] : io->conns) ::close(fd);  // only if a loop never ran
    io->conns.clear();
    if (io->epfd >= 0) ::close(io->epfd);
    if (io->evfd >= 0) ::close(io->evfd);
  }
  threads.clear();
  if (listen_fd >= 0) ::close(listen_fd);
  listen_fd = -1;
  return Status::OK();
}

void Server::Impl::Wake(IoThread* io) {
  const uint64_t one = 1;
  ssize_t r = ::write(io->evfd, &one, sizeof one);
  (void)r;
}

// ---- the loop ----

void Server::Impl::Loop(IoThread* io) {
  t_current_io = io;
  {
    char name[16];
    if (io->batch) {
      std::snprintf(name, sizeof name, "nvmw-bio%d", io->index - options.io_threads);
    } else {
      std::snprintf(name, sizeof name, "nvmw-io%d", io->index);
    }
    (void)::pthread_setname_np(::pthread_self(), name);  // per-thread CPU accounting
  }
  if (io->batch && options.batch_io_idle) {
    // Best effort: without it the loop keeps normal priority.
    sched_param sp{};
    (void)::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &sp);
  }
  epoll_event events[kMaxEvents];
  bool listening = !io->batch;
  int64_t stop_deadline_ns = 0;
  bool draining = false;
  int64_t last_tick_ns = NowNs();
  bool had_events = false;
  std::vector<std::unique_ptr<Conn>> graveyard;
  io->graveyard = &graveyard;
  for (;;) {
    int n = 0;
    // ServerOptions::poll_ns: after a turn with work, poll a while before sleeping, if
    // the machine has a core to spare for it (never on a batch loop, which yields).
    if (had_events && options.poll_ns > 0 && !io->batch && mw->CoreToSpare()) {
      const int64_t until = NowNs() + options.poll_ns;
      do {
        n = ::epoll_wait(io->epfd, events, kMaxEvents, 0);
      } while (n == 0 && NowNs() < until);
      if (n > 0) polled_turns.fetch_add(1, std::memory_order_relaxed);
    }
    if (n == 0) n = ::epoll_wait(io->epfd, events, kMaxEvents, kLoopTickMs);
    had_events = n > 0;
    io->turn_events = n;
    for (int i = 0; i < std::max(n, 0); ++i) {
      if (io->puts.size() >= kGroupRunAt) EndTurn(io);
      void* tag = events[i].data.ptr;
      const uint32_t ev = events[i].events;
      if (tag == &g_listen_tag) {
        if (listening && !IsStopping()) Accept(io);
        continue;
      }
      if (tag == io) {
        uint64_t v;
        while (::read(io->evfd, &v, sizeof v) > 0) {
        }
        AdoptConns(io);
        DrainMailbox(io);
        continue;
      }
      Conn* c = static_cast<Conn*>(tag);
      if (c->closed) continue;
      if (ev & (EPOLLERR | EPOLLHUP)) {
        Close(io, c);  // the peer is gone both ways: nothing to read, nobody to answer
        continue;
      }
      if (ev & EPOLLIN) OnReadable(io, c);
      if (!c->closed && !c->move_to && (ev & EPOLLOUT)) OnWritable(io, c);
    }
    EndTurn(io);
    MoveConns(io);
    const int64_t now = NowNs();
    if (io->accept_paused && now >= io->accept_resume_ns && !IsStopping()) {
      io->accept_paused = false;
      epoll_event lev{};
      lev.events = EPOLLIN | (options.io_threads > 1 ? static_cast<uint32_t>(EPOLLEXCLUSIVE) : 0u);
      lev.data.ptr = &g_listen_tag;
      ::epoll_ctl(io->epfd, EPOLL_CTL_ADD, listen_fd, &lev);
    }
    if (now - last_tick_ns >= kLoopTickMs * 1000000LL) {
      last_tick_ns = now;
      CheckStalls(io, now);
    }
    if (IsStopping()) {
      if (!draining) {
        draining = true;
        if (listening) ::epoll_ctl(io->epfd, EPOLL_CTL_DEL, listen_fd, nullptr);
        listening = false;
        stop_deadline_ns = DeadlineNs(now, options.stop_timeout_s);
        for (auto& [fd, c] : io->conns) UpdateInterest(io, c.get());  // no more reading
      }
      // Connections with nothing in flight and nothing left to write are done; the
      // others finish their command and flush (slow readers until the deadline).
      std::vector<Conn*> done;
      for (auto& [fd, c] : io->conns) {
        const bool idle = !c->pending && c->out.empty() && c->in_pos == c->in.size();
        if (idle || (now >= stop_deadline_ns && !c->in_flight)) done.push_back(c.get());
      }
      for (Conn* c : done) Close(io, c);
      if (io->conns.empty() && io->zombies.empty()) {
        // A connection may still be on its way from another loop: serve it first.
        std::lock_guard<std::mutex> lock(io->mailbox_mu);
        if (io->adopt.empty()) {
          io->adopt_closed = true;
          graveyard.clear();
          break;
        }
      }
    }
    EndTurn(io);  // requests of commands resumed after the turn's events (none, usually)
    graveyard.clear();
  }
  io->graveyard = nullptr;
  t_current_io = nullptr;
}

void Server::Impl::Accept(IoThread* io) {
  for (int k = 0; k < kAcceptsPerEvent; ++k) {
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ::epoll_ctl(io->epfd, EPOLL_CTL_DEL, listen_fd, nullptr);
        io->accept_paused = true;
        io->accept_resume_ns = NowNs() + kLoopTickMs * 1000000LL;
      }
      return;  // EAGAIN: another loop took it, or none left
    }
    if (options.protected_mode && options.password.empty() && !IsLoopbackPeer(peer)) {
      rejected_connections.fetch_add(1, std::memory_order_relaxed);
      ssize_t r = ::send(fd, kDeniedMsg, sizeof kDeniedMsg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)r;
      ::close(fd);
      continue;
    }
    if (connections_current.fetch_add(1) >= options.max_clients) {
      connections_current.fetch_sub(1);
      rejected_connections.fetch_add(1, std::memory_order_relaxed);
      static const char kMsg[] = "-ERR max number of clients reached\r\n";
      ssize_t r = ::send(fd, kMsg, sizeof kMsg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)r;
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>(limits);
    c->fd = fd;
    c->id = next_conn_id.fetch_add(1, std::memory_order_relaxed);
    c->io = io;
    c->authed = options.password.empty();
    c->events = EPOLLIN;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c.get();
    if (::epoll_ctl(io->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      connections_current.fetch_sub(1);
      ::close(fd);
      continue;
    }
    connections_total.fetch_add(1, std::memory_order_relaxed);
    io->conns.emplace(fd, std::move(c));
  }
}

bool Server::Impl::MayParse(const Conn* c) const {
  return !c->closed && !c->pending && !c->close_after_write && !c->move_to &&
         c->out_bytes < options.max_output_bytes;
}

bool Server::Impl::MayRead(const Conn* c) const {
  return MayParse(c) && c->in_pos == c->in.size() && !IsStopping();
}

size_t Server::Impl::ParseFrom(IoThread* io, Conn* c, const char* data, size_t n) {
  size_t off = 0;
  while (MayParse(c)) {
    size_t used = 0;
    c->parser.set_unauthenticated(!c->authed);  // AUTH may have changed it
    const resp::Parser::Result r = c->parser.Parse(data + off, n - off, &used);
    off += used;
    if (r == resp::Parser::Result::kNeedMore) break;
    if (r == resp::Parser::Result::kError) {
      protocol_errors.fetch_add(1, std::memory_order_relaxed);
      Send(c, [&](std::string* out) { resp::AppendError(out, "ERR " + c->parser.error()); });
      c->close_after_write = true;
      break;
    }
    commands.fetch_add(1, std::memory_order_relaxed);
    Execute(io, c, c->parser.args());
  }
  return off;
}

void Server::Impl::OnReadable(IoThread* io, Conn* c) {
  if (c->lingering) {
    Linger(io, c);
    return;
  }
  for (int k = 0; k < kReadsPerEvent && MayRead(c); ++k) {
    if (ShouldMoveToBatch(io, c)) {
      RequestMove(io, c, true);  // the rest of the value is received by a batch loop
      break;
    }
    // Inside a large argument (a big SET value): read straight into the argument's own
    // buffer, not through the read buffer and a copy.
    size_t room = 0;
    if (char* sink = c->parser.BulkSink(kReadChunk, &room)) {
      const ssize_t r = ::read(c->fd, sink, room);
      if (r == 0) {
        Close(io, c);
        return;
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) Close(io, c);
        break;
      }
      c->parser.BulkFilled(static_cast<size_t>(r));
      if (static_cast<size_t>(r) < room) break;
      continue;
    }
    const ssize_t r = ::read(c->fd, t_read_buf, kReadChunk);
    if (r == 0) {
      Close(io, c);  // as Redis: a client that closed gets no more replies
      return;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) Close(io, c);
      break;
    }
    c->in.clear();
    c->in_pos = 0;
    const size_t used = ParseFrom(io, c, t_read_buf, static_cast<size_t>(r));
    if (used < static_cast<size_t>(r)) {
      // The connection stopped taking commands (one in flight, output at the cap): keep
      // the rest for when it resumes.
      c->in.assign(t_read_buf + used, static_cast<size_t>(r) - used);
    }
    if (static_cast<size_t>(r) < kReadChunk) break;
  }
  if (!c->closed) Flush(io, c);
}

void Server::Impl::ProcessInput(IoThread* io, Conn* c) {
  if (c->in_pos < c->in.size()) {
    c->in_pos += ParseFrom(io, c, c->in.data() + c->in_pos, c->in.size() - c->in_pos);
    if (c->in_pos == c->in.size()) {
      c->in.clear();
      c->in_pos = 0;
    }
  }
}

void Server::Impl::OnWritable(IoThread* io, Conn* c) { Flush(io, c); }

void Server::Impl::NoteOutputPeak(const Conn* c) {
  const uint64_t held = c->out_bytes + (c->pending ? c->pending->held : 0);
  uint64_t peak = output_peak_bytes.load(std::memory_order_relaxed);
  while (held > peak && !output_peak_bytes.compare_exchange_weak(peak, held, std::memory_order_relaxed)) {
  }
}

void Server::Impl::Flush(IoThread* io, Conn* c) {
  if (c->closed) return;
  for (;;) {
    // Output only grows between two writes, and every write is made here: the peak is
    // seen before it.
    NoteOutputPeak(c);
    while (!c->out.empty()) {
      iovec iov[kMaxIov];
      int cnt = 0;
      size_t off = c->out_off;
      for (auto it = c->out.begin(); it != c->out.end() && cnt < kMaxIov; ++it) {
        iov[cnt].iov_base = it->data.data() + off;
        iov[cnt].iov_len = it->data.size() - off;
        off = 0;
        ++cnt;
      }
      ssize_t w;
      if (cnt == 1) {
        // The usual small reply: send() spares the kernel importing a message header
        // and an iovec array.
        w = ::send(c->fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL);
      } else {
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = static_cast<size_t>(cnt);
        w = ::sendmsg(c->fd, &msg, MSG_NOSIGNAL);
      }
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        Close(io, c);
        return;
      }
      size_t left = static_cast<size_t>(w);
      c->out_bytes -= left;
      c->stalled_since_ns = 0;
      while (left > 0) {
        OutPiece& front = c->out.front();
        const size_t rest = front.data.size() - c->out_off;
        if (left >= rest) {
          left -= rest;
          c->out.pop_front();
          c->out_off = 0;
        } else {
          c->out_off += left;
          left = 0;
        }
      }
    }
    if (c->out.empty() && c->close_after_write) {
      Linger(io, c);
      return;
    }
    // An MGET paused at the cap (nothing in flight) and the output went below it: its
    // next keys are read now; what they queue is written in the next round.
    if (c->pending && !c->in_flight && c->out_bytes < options.max_output_bytes) {
      const uint64_t before = c->out_bytes;
      Continue(io, c);
      if (c->out_bytes != before) continue;
    }
    // Output went below the cap: commands already read may go on. Loops (no recursion)
    // while that makes progress, writing what each round produced.
    if (!c->pending && c->in_pos < c->in.size() && MayParse(c)) {
      const size_t before = c->in_pos;
      const size_t before_size = c->in.size();
      ProcessInput(io, c);
      const bool progressed = c->in.size() != before_size || c->in_pos != before;
      if (progressed && !c->out.empty()) continue;
    }
    break;
  }
  UpdateInterest(io, c);
}

void Server::Impl::UpdateInterest(IoThread* io, Conn* c) {
  // Waiting in the group commit: its interest is set when the group is done, before the
  // loop waits again (no epoll_ctl for the pause of each SET).
  if (c->closed || c->in_group) return;
  uint32_t want = 0;
  if (MayRead(c) || c->lingering) want |= EPOLLIN;
  if (!c->out.empty()) want |= EPOLLOUT;
  if (want == c->events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = c;
  ::epoll_ctl(io->epfd, EPOLL_CTL_MOD, c->fd, &ev);
  c->events = want;
}

void Server::Impl::Close(IoThread* io, Conn* c) {
  if (c->closed) return;
  // Uncounted before the descriptor is closed: a client that saw the connection end
  // (QUIT, then EOF) and connects again must find its place free under max_clients.
  connections_current.fetch_sub(1);
  ::epoll_ctl(io->epfd, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  c->closed = true;
  auto node = io->conns.extract(c->fd);
  if (node.empty()) return;
  // Freed after this loop iteration (later events of the batch may name it), or, with
  // a request still at the middleware, once its completion comes back.
  if (c->in_flight) {
    io->zombies.push_back(std::move(node.mapped()));
  } else {
    io->graveyard->push_back(std::move(node.mapped()));
  }
}

// The replies of a connection that ends (QUIT, a protocol error) are all with the kernel,
// but the client may have sent more behind the command (a pipeline), which is never run.
// Closing a socket with unread input resets the connection, and the kernel drops the
// replies it has not sent yet: the client would miss some. With nothing unread the socket
// is closed at once (the replies go out, then FIN). Otherwise, as a web server's lingering
// close does: shut the write side (the replies go out, then FIN), read and drop whatever
// comes until the client closes too, and close then, or after kLingerNs (CheckStalls), or
// at Stop.
void Server::Impl::Linger(IoThread* io, Conn* c) {
  if (!c->lingering) {
    int unread = 0;
    const bool more = c->in_pos < c->in.size() || (::ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0);
    if (!more || ::shutdown(c->fd, SHUT_WR) != 0) {
      Close(io, c);
      return;
    }
    c->lingering = true;
    c->linger_until_ns = NowNs() + kLingerNs;
    c->in.clear();
    c->in.shrink_to_fit();
    c->in_pos = 0;
  }
  for (int k = 0; k < kReadsPerEvent; ++k) {
    const ssize_t r = ::read(c->fd, t_read_buf, kReadChunk);
    if (r > 0) continue;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(io, c);  // the client has closed too (or the connection failed)
    return;
  }
  UpdateInterest(io, c);
}

void Server::Impl::DrainMailbox(IoThread* io) {
  std::vector<Conn*> ready;
  {
    std::lock_guard<std::mutex> lock(io->mailbox_mu);
    ready.swap(io->mailbox);
  }
  for (Conn* c : ready) Resume(io, c);
}

void Server::Impl::Resume(IoThread* io, Conn* c) {
  c->in_flight = false;
  io->in_flight.fetch_sub(1, std::memory_order_relaxed);
  if (c->closed) {
    auto it = std::find_if(io->zombies.begin(), io->zombies.end(),
                           [c](const std::unique_ptr<Conn>& z) { return z.get() == c; });
    if (it != io->zombies.end()) {
      io->graveyard->push_back(std::move(*it));
      *it = std::move(io->zombies.back());
      io->zombies.pop_back();
    }
    return;
  }
  Absorb(c);
  Continue(io, c);
  if (!c->pending) ProcessInput(io, c);
  if (!c->closed) Flush(io, c);
}

bool Server::Impl::ShouldMoveToBatch(const IoThread* io, const Conn* c) const {
  if (io->batch || options.batch_io_threads == 0 || c->cls == RequestClass::kInteractive) return false;
  const uint64_t len = c->parser.bulk_in_progress();
  return len > 0 && len >= mw->options().batch_threshold_bytes;
}

void Server::Impl::RequestMove(IoThread* io, Conn* c, bool batch) {
  if (options.batch_io_threads == 0 || IsStopping() || c->move_to != nullptr || io->batch == batch) return;
  const size_t k = batch ? static_cast<size_t>(options.io_threads) +
                               next_batch_loop.fetch_add(1) % options.batch_io_threads
                         : next_inter_loop.fetch_add(1) % options.io_threads;
  c->move_to = threads[k].get();
  io->to_move.push_back(c);
}

void Server::Impl::MoveConns(IoThread* io) {
  if (io->to_move.empty()) return;
  std::vector<Conn*> list;
  list.swap(io->to_move);
  for (Conn* c : list) {
    IoThread* to = c->move_to;
    c->move_to = nullptr;
    if (c->closed) continue;  // freed with the graveyard after this turn
    if (!IsStopping() && !c->in_flight && !c->pending) {
      ::epoll_ctl(io->epfd, EPOLL_CTL_DEL, c->fd, nullptr);
      auto node = io->conns.extract(c->fd);
      c->io = to;
      c->events = 0;
      bool handed = false;
      {
        std::lock_guard<std::mutex> lock(to->mailbox_mu);
        if (!to->adopt_closed) {
          to->adopt.push_back(std::move(node.mapped()));
          handed = true;
          Wake(to);  // under the lock, as in Post: the other loop cannot exit before it
        }
      }
      if (handed) {
        // From here on the connection belongs to the other loop: not touched again here.
        if (to->batch) batch_moves.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      c->io = io;  // the other loop has ended (Stop): the connection stays
      epoll_event ev{};
      ev.data.ptr = c;
      ::epoll_ctl(io->epfd, EPOLL_CTL_ADD, c->fd, &ev);
      io->conns.insert(std::move(node));
    }
    // Not moved: the connection goes on here.
    ProcessInput(io, c);
    if (!c->closed) Flush(io, c);
  }
}

void Server::Impl::AdoptConns(IoThread* io) {
  std::vector<std::unique_ptr<Conn>> list;
  {
    std::lock_guard<std::mutex> lock(io->mailbox_mu);
    list.swap(io->adopt);
  }
  for (auto& owned : list) {
    Conn* c = owned.get();
    epoll_event ev{};  // no events yet; Flush registers what the connection needs
    ev.data.ptr = c;
    if (::epoll_ctl(io->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
      ::close(c->fd);
      c->closed = true;
      connections_current.fetch_sub(1);
      io->graveyard->push_back(std::move(owned));
      continue;
    }
    io->conns.emplace(c->fd, std::move(owned));
    ProcessInput(io, c);  // bytes read on the other loop and not parsed yet
    if (!c->closed) Flush(io, c);
  }
}

void Server::Impl::Post(Conn* c) {
  IoThread* io = c->io;
  // The wake-up is written under the mailbox lock. The loop takes a connection out of the
  // mailbox only under that lock, and once it has it the loop may finish the request,
  // close the connection and exit, and Stop then closes the eventfd: a write after the
  // unlock could reach a closed (or reused) descriptor.
  std::lock_guard<std::mutex> lock(io->mailbox_mu);
  const bool was_empty = io->mailbox.empty();
  io->mailbox.push_back(c);
  if (was_empty) Wake(io);
}

void Server::Impl::CheckStalls(IoThread* io, int64_t now_ns) {
  const int64_t limit_ns = TimeoutNs(options.output_stall_timeout_s);
  std::vector<Conn*> stalled;
  std::vector<Conn*> lingered;
  for (auto& [fd, c] : io->conns) {
    if (c->lingering && now_ns >= c->linger_until_ns) lingered.push_back(c.get());
    if (c->out_bytes < options.max_output_bytes) {
      c->stalled_since_ns = 0;
    } else if (c->stalled_since_ns == 0) {
      c->stalled_since_ns = now_ns;
    } else if (now_ns - c->stalled_since_ns >= limit_ns) {
      stalled.push_back(c.get());
    }
  }
  for (Conn* c : stalled) {
    output_buffer_closes.fetch_add(1, std::memory_order_relaxed);
    Close(io, c);
  }
  for (Conn* c : lingered) Close(io, c);
}

// ---- public entry points ----

Server::Server() : impl_(new Impl) {}

Server::~Server() { Stop(); }

Status Server::Start(Middleware* mw, Engine* engine, const ServerOptions& options) {
  return impl_->Start(mw, engine, options);
}

int Server::port() const { return impl_->port.load(); }

Status Server::Stop() { return impl_->Stop(); }

size_t Server::max_clients() const { return impl_->max_clients.load(); }

ServerStats Server::Stats() const {
  ServerStats s;
  s.connections_current = impl_->connections_current.load(std::memory_order_relaxed);
  s.connections_total = impl_->connections_total.load(std::memory_order_relaxed);
  s.rejected_connections = impl_->rejected_connections.load(std::memory_order_relaxed);
  s.commands = impl_->commands.load(std::memory_order_relaxed);
  s.protocol_errors = impl_->protocol_errors.load(std::memory_order_relaxed);
  s.auth_failures = impl_->auth_failures.load(std::memory_order_relaxed);
  s.output_buffer_closes = impl_->output_buffer_closes.load(std::memory_order_relaxed);
  s.output_peak_bytes = impl_->output_peak_bytes.load(std::memory_order_relaxed);
  s.batch_moves = impl_->batch_moves.load(std::memory_order_relaxed);
  s.group_commits = impl_->group_commits.load(std::memory_order_relaxed);
  s.grouped_sets = impl_->grouped_sets.load(std::memory_order_relaxed);
  s.polled_turns = impl_->polled_turns.load(std::memory_order_relaxed);
  return s;
}

}  // namespace nvmw
