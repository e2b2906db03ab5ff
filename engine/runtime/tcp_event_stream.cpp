#include "tcp_event_stream.h"

#include "core/error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <system_error>
#include <unistd.h>

namespace shardscope {

struct TcpEventStream::Address {
    sockaddr_storage storage{};
    socklen_t length = 0;
    int family = AF_UNSPEC;
};

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kSendRetry{100};

const char* const kExpectedForm = "expected tcp://HOST:PORT with a port from 1 to 65535 (for "
                                  "example tcp://127.0.0.1:9400) or unix:PATH with an absolute "
                                  "path (for example unix:/tmp/shardscope.sock)";

// sun_path's size, less its terminating zero.
constexpr std::size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;

[[noreturn]] void badAddress(const std::string& text, const std::string& why) {
    throw InputError("telemetry collector '" + text + "': " + why + "; " + kExpectedForm);
}

// Milliseconds for poll(), rounded up so a wait never ends just before its deadline and spins.
int pollMs(Clock::duration remaining) {
    if (remaining <= Clock::duration::zero())
        return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(remaining).count();
    return static_cast<int>(std::min<decltype(ms)>(ms, 60'000));
}

void closeFd(int& fd) {
    if (fd >= 0)
        ::close(fd);
    fd = -1;
}

} // namespace

CollectorAddress parseCollectorAddress(const std::string& text) {
    if (text.starts_with("unix:")) {
        CollectorAddress unix;
        unix.path = text.substr(5);
        if (unix.path.empty() || unix.path.front() != '/')
            badAddress(text, "a Unix socket's path must be absolute");
        if (unix.path.size() > kMaxSocketPath)
            badAddress(text, "a Unix socket's path holds at most " +
                                 std::to_string(kMaxSocketPath) + " bytes, this one " +
                                 std::to_string(unix.path.size()));
        if (unix.path.find('\0') != std::string::npos)
            badAddress(text, "the path contains a zero byte");
        return unix;
    }
    const std::string scheme = "tcp://";
    if (text.compare(0, scheme.size(), scheme) != 0)
        badAddress(text, "the scheme must be tcp:// or unix:");
    const std::string rest = text.substr(scheme.size());

    std::string host;
    std::string port;
    if (!rest.empty() && rest.front() == '[') {
        const std::size_t close = rest.find(']');
        if (close == std::string::npos)
            badAddress(text, "an IPv6 address opened with '[' needs a closing ']'");
        host = rest.substr(1, close - 1);
        if (close + 1 >= rest.size() || rest[close + 1] != ':')
            badAddress(text, "no port after the host");
        port = rest.substr(close + 2);
    } else {
        const std::size_t colon = rest.rfind(':');
        if (colon == std::string::npos)
            badAddress(text, "no port after the host");
        host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
        if (host.find(':') != std::string::npos)
            badAddress(text, "an IPv6 host must be written in brackets, as tcp://[::1]:9400");
    }
    if (host.empty())
        badAddress(text, "the host is empty");
    if (port.empty())
        badAddress(text, "the port is empty");
    if (port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
        badAddress(text, "port '" + port + "' is not a number from 1 to 65535");
    const int number = std::stoi(port);
    if (number < 1 || number > 65535)
        badAddress(text, "port " + port + " is out of range");
    return {host, number, {}};
}

TcpEventStream::TcpEventStream(const std::string& collector, std::size_t capacity,
                               std::vector<std::string> greeting)
    : collector_(collector), capacity_(capacity), greeting_(std::move(greeting)) {
    if (capacity == 0)
        throw InputError("telemetry queue capacity must be at least 1 event");
    const CollectorAddress address = parseCollectorAddress(collector);

    if (!address.path.empty())
        addresses_.push_back(unixAddress(address.path));
    else
        resolve(address);

    if (::pipe(wakePipe_) != 0)
        throw std::system_error(errno, std::generic_category(), "telemetry stream wake pipe");
    for (int fd : wakePipe_) {
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    queue_.reserve(std::min<std::size_t>(capacity_, 1024));
    try {
        thread_ = std::thread([this] { run(); });
    } catch (...) {
        closeFd(wakePipe_[0]);
        closeFd(wakePipe_[1]);
        throw;
    }
}

TcpEventStream::Address TcpEventStream::unixAddress(const std::string& path) {
    sockaddr_un name{};
    name.sun_family = AF_UNIX;
    std::memcpy(name.sun_path, path.data(), path.size()); // length checked by the parser
    Address a;
    std::memcpy(&a.storage, &name, sizeof name);
    a.length = socklen_t(offsetof(sockaddr_un, sun_path) + path.size() + 1);
    a.family = AF_UNIX;
    return a;
}

void TcpEventStream::resolve(const CollectorAddress& address) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(address.port);
    const int rc = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0)
        throw InputError("telemetry collector '" + collector_ + "': cannot resolve host '" +
                         address.host +
                         "': " + (rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc)));
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        if (a->ai_addrlen > sizeof(sockaddr_storage))
            continue;
        Address resolved;
        std::memcpy(&resolved.storage, a->ai_addr, a->ai_addrlen);
        resolved.length = a->ai_addrlen;
        resolved.family = a->ai_family;
        addresses_.push_back(resolved);
    }
    ::freeaddrinfo(found);
    if (addresses_.empty())
        throw InputError("telemetry collector '" + collector_ + "': host '" + address.host +
                         "' has no usable address");
}

TcpEventStream::~TcpEventStream() {
    close();
    closeFd(wakePipe_[0]);
    closeFd(wakePipe_[1]);
}

void TcpEventStream::push(std::string line) {
    pushed_.fetch_add(1, std::memory_order_relaxed);
    bool wasEmpty = false;
    {
        std::lock_guard lock(mutex_);
        if (closed_ || queue_.size() >= capacity_) {
            dropped_.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        wasEmpty = queue_.empty();
        queue_.push_back(std::move(line));
    }
    // The thread only sleeps on an empty queue, so later pushes need not pay for a wake-up.
    if (wasEmpty)
        wake_.notify_one();
}

void TcpEventStream::setGreeting(std::vector<std::string> lines) {
    std::lock_guard lock(mutex_);
    greeting_ = std::move(lines);
}

std::vector<std::string> TcpEventStream::greeting() const {
    std::lock_guard lock(mutex_);
    return greeting_;
}

bool TcpEventStream::waitUntilSent(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return idle_.wait_for(lock, timeout, [this] { return queue_.empty() && !sending_; });
}

void TcpEventStream::settle(std::chrono::milliseconds timeout) {
    if (waitUntilSent(timeout))
        return;
    std::unique_lock lock(mutex_);
    if (closed_)
        return; // close() already accounted for everything
    abandon_.store(true, std::memory_order_release);
    std::vector<std::string> queued;
    queued.swap(queue_);
    drop(queued);
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(wakePipe_[1], &byte, 1);
    // sendAll() sees abandon_ within one poll slice and the batch is accounted for.
    idle_.wait(lock, [this] { return !sending_; });
    abandon_.store(false, std::memory_order_release);
    char buffer[16];
    while (::read(wakePipe_[0], buffer, sizeof buffer) > 0) {
    }
}

void TcpEventStream::close() {
    {
        std::lock_guard lock(mutex_);
        if (closed_)
            return;
        closed_ = true;
        drainDeadline_ = Clock::now() + kDrainTime;
        stop_.store(true, std::memory_order_release);
    }
    wake_.notify_one();
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(wakePipe_[1], &byte, 1);
    if (thread_.joinable())
        thread_.join();
}

EventStreamStats TcpEventStream::stats() const {
    EventStreamStats s;
    s.pushed = pushed_.load(std::memory_order_relaxed);
    s.sent = sent_.load(std::memory_order_relaxed);
    s.dropped = dropped_.load(std::memory_order_relaxed);
    s.connected = connected_.load(std::memory_order_relaxed);
    return s;
}

void TcpEventStream::run() {
    std::vector<std::string> batch;
    bool finalAttempt = false;
    for (;;) {
        const bool stopping = stop_.load(std::memory_order_acquire);
        if (fd_ < 0) {
            if (!stopping) {
                if (!connectOnce())
                    dropFor(kRetryInterval);
                continue;
            }
            // One more try within the drain window, so a short run (or the last events, "end"
            // among them, after a reconnect) still reaches a collector that is there.
            if (finalAttempt || !hasQueued() || !connectOnce())
                break;
            finalAttempt = true;
            continue;
        }
        {
            std::unique_lock lock(mutex_);
            // Waking once a second while idle notices a collector that went away between events.
            wake_.wait_for(lock, std::chrono::seconds(1), [this] {
                return stop_.load(std::memory_order_relaxed) || !queue_.empty();
            });
            batch.swap(queue_);
            sending_ = !batch.empty();
        }
        if (batch.empty()) {
            if (stopping || stop_.load(std::memory_order_acquire))
                break;
            if (peerClosed())
                disconnect();
            continue;
        }
        sendBatch(batch);
        batch.clear();
        {
            std::lock_guard lock(mutex_);
            sending_ = false;
        }
        idle_.notify_all();
    }
    disconnect();
    std::vector<std::string> rest;
    {
        std::lock_guard lock(mutex_);
        rest.swap(queue_);
        sending_ = false;
    }
    drop(batch);
    drop(rest);
    idle_.notify_all();
}

bool TcpEventStream::connectOnce() {
    for (const Address& address : addresses_) {
        int fd = ::socket(address.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length);
        if (rc != 0 && errno == EINPROGRESS) {
            const Clock::time_point timeout = Clock::now() + kConnectTimeout;
            bool ready = false;
            for (;;) {
                const bool stopping = stop_.load(std::memory_order_acquire);
                const Clock::time_point deadline =
                    stopping ? std::min(timeout, drainDeadline_) : timeout;
                const Clock::duration remaining = deadline - Clock::now();
                if (remaining <= Clock::duration::zero())
                    break;
                // The wake pipe cuts the wait short when close() starts the drain window.
                pollfd fds[2] = {{fd, POLLOUT, 0}, {wakePipe_[0], POLLIN, 0}};
                if (::poll(fds, stopping ? 1 : 2, pollMs(remaining)) < 0 && errno != EINTR)
                    break;
                if (fds[0].revents & (POLLOUT | POLLERR | POLLHUP)) {
                    ready = true;
                    break;
                }
            }
            if (!ready) {
                closeFd(fd);
                continue;
            }
            int error = 0;
            socklen_t length = sizeof error;
            rc =
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0 ? 0 : -1;
        }
        if (rc != 0) {
            closeFd(fd);
            continue;
        }
        const int one = 1;
        if (address.family != AF_UNIX)
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
#ifdef SO_NOSIGPIPE
        ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
        fd_ = fd;
        // The greeting opens every connection; a collector that cannot take it is gone.
        std::string greeting;
        for (const std::string& line : this->greeting())
            greeting += line + '\n';
        if (sendAll(greeting.data(), greeting.size()) != greeting.size()) {
            closeFd(fd_);
            continue;
        }
        connected_.store(true, std::memory_order_relaxed);
        return true;
    }
    return false;
}

bool TcpEventStream::hasQueued() {
    std::lock_guard lock(mutex_);
    return !queue_.empty();
}

void TcpEventStream::disconnect() {
    closeFd(fd_);
    connected_.store(false, std::memory_order_relaxed);
}

bool TcpEventStream::peerClosed() {
    pollfd fds{fd_, POLLIN, 0};
    if (::poll(&fds, 1, 0) <= 0)
        return false;
    if (fds.revents & (POLLERR | POLLHUP | POLLNVAL))
        return true;
    // The protocol is one-way, so readable means end of stream; anything a collector does send
    // is read and ignored so it cannot fill our receive buffer.
    char buffer[4096];
    for (;;) {
        const ssize_t n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0)
            return true;
        if (errno == EINTR)
            continue;
        return errno != EAGAIN && errno != EWOULDBLOCK;
    }
}

std::size_t TcpEventStream::sendAll(const char* data, std::size_t size) {
    std::size_t done = 0;
    Clock::time_point lastProgress = Clock::now();
    while (done < size) {
        // MSG_NOSIGNAL: a collector that vanished yields EPIPE here instead of killing the
        // process with SIGPIPE.
        const ssize_t n = ::send(fd_, data + done, size - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            lastProgress = Clock::now();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            break;
        if (abandon_.load(std::memory_order_acquire))
            break;
        const bool stopping = stop_.load(std::memory_order_acquire);
        Clock::time_point deadline = lastProgress + kStallTimeout;
        if (stopping)
            deadline = std::min(deadline, drainDeadline_);
        const Clock::duration remaining = deadline - Clock::now();
        if (remaining <= Clock::duration::zero())
            break;
        // Once stopping, the wake pipe stays readable; leaving it out keeps the wait a wait.
        // POLLOUT waits for a third of the buffer to be free, yet send() may take a smaller
        // part sooner (Linux frees space without a wake-up), so the wait is sliced to retry.
        pollfd fds[2] = {{fd_, POLLOUT, 0}, {wakePipe_[0], POLLIN, 0}};
        const int ms = std::min(pollMs(remaining), static_cast<int>(kSendRetry.count()));
        if (::poll(fds, stopping ? 1 : 2, ms) < 0 && errno != EINTR)
            break;
    }
    return done;
}

void TcpEventStream::sendBatch(const std::vector<std::string>& batch) {
    std::string buffer;
    std::vector<std::size_t> ends;
    ends.reserve(batch.size());
    std::size_t total = 0;
    for (const std::string& line : batch)
        total += line.size() + 1;
    buffer.reserve(total);
    for (const std::string& line : batch) {
        buffer += line;
        buffer += '\n';
        ends.push_back(buffer.size());
    }
    const std::size_t done = sendAll(buffer.data(), buffer.size());
    const auto complete = std::upper_bound(ends.begin(), ends.end(), done) - ends.begin();
    sent_.fetch_add(complete, std::memory_order_relaxed);
    dropped_.fetch_add(static_cast<std::int64_t>(batch.size()) - complete,
                       std::memory_order_relaxed);
    if (done < buffer.size())
        disconnect();
}

void TcpEventStream::dropFor(std::chrono::milliseconds duration) {
    const Clock::time_point deadline = Clock::now() + duration;
    std::vector<std::string> lines;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            const bool woken = wake_.wait_until(lock, deadline, [this] {
                return stop_.load(std::memory_order_relaxed) || !queue_.empty();
            });
            if (!woken || stop_.load(std::memory_order_relaxed))
                return;
            lines.swap(queue_);
        }
        drop(lines);
        idle_.notify_all();
    }
}

void TcpEventStream::drop(std::vector<std::string>& lines) {
    dropped_.fetch_add(static_cast<std::int64_t>(lines.size()), std::memory_order_relaxed);
    lines.clear();
}

} // namespace shardscope
