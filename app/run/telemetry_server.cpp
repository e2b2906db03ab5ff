#include "telemetry_server.h"

#include "watch/run_files.h"

#include <QLocalServer>
#include <QLocalSocket>
#include <QMetaObject>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTimer>
#include <optional>

namespace shardscope {

struct TelemetryServer::Connection {
    QString peer;        // who it is, as far as the socket says (for a refusal's message)
    std::string pending; // bytes after the last complete line
    std::optional<watch::Hello> hello;
    bool overlong = false; // skipping the rest of a line longer than the limit
};

namespace {
// Before its hello a connection is a stranger: it gets little room and little time, and only so
// many of them at once, so strangers cannot crowd out the ranks.
constexpr std::size_t kHelloBytes = 4096;
constexpr qint64 kHelloMilliseconds = 10000;
constexpr std::size_t kStrangers = 64;

void abortSocket(QIODevice* socket) {
    if (auto* tcp = qobject_cast<QTcpSocket*>(socket))
        tcp->abort();
    else if (auto* local = qobject_cast<QLocalSocket*>(socket))
        local->abort();
}
} // namespace

TelemetryServer::TelemetryServer(LiveRun* run, QObject* parent) : QObject(parent), run_(run) {
    thread_.setObjectName("telemetry");
}

TelemetryServer::~TelemetryServer() {
    stop();
}

quint16 TelemetryServer::start(const QHostAddress& address, quint16 port, const QString& token,
                               QString* error) {
    return begin(
               token, [&] { return listenHere(address, port); }, error)
               ? port_
               : 0;
}

bool TelemetryServer::startLocal(const QString& path, const QString& token, QString* error) {
    return begin(
        token, [&] { return listenLocal(path); }, error);
}

bool TelemetryServer::begin(const QString& token, const std::function<QString()>& listen,
                            QString* error) {
    stop();
    token_ = token;
    // The server and its sockets are made in the thread that serves them.
    worker_ = new QObject;
    worker_->moveToThread(&thread_);
    thread_.start();
    QString failure;
    QMetaObject::invokeMethod(
        worker_, [&] { failure = listen(); }, Qt::BlockingQueuedConnection);
    if (!failure.isEmpty()) {
        stop();
        if (error)
            *error = failure;
        return false;
    }
    return true;
}

QString TelemetryServer::listenHere(const QHostAddress& address, quint16 port) {
    server_ = new QTcpServer;
    QObject::connect(server_, &QTcpServer::newConnection, server_, [this] {
        while (QTcpSocket* socket = server_->nextPendingConnection())
            accept(socket, socket->peerAddress().toString(), true);
    });
    if (!server_->listen(address, port)) {
        const QString why = QString("cannot listen for telemetry on %1:%2: %3")
                                .arg(address.toString())
                                .arg(port)
                                .arg(server_->errorString());
        delete server_;
        server_ = nullptr;
        return why;
    }
    port_ = server_->serverPort();
    return {};
}

QString TelemetryServer::listenLocal(const QString& path) {
    local_ = new QLocalServer;
    local_->setSocketOptions(QLocalServer::UserAccessOption);
    QObject::connect(local_, &QLocalServer::newConnection, local_, [this] {
        while (QLocalSocket* socket = local_->nextPendingConnection())
            accept(socket, "a local process", false);
    });
    if (!local_->listen(path)) {
        const QString why =
            QString("cannot listen for telemetry on %1: %2").arg(path, local_->errorString());
        delete local_;
        local_ = nullptr;
        return why;
    }
    path_ = local_->fullServerName();
    return {};
}

void TelemetryServer::stop() {
    if (!thread_.isRunning())
        return;
    QMetaObject::invokeMethod(
        worker_,
        [this] {
            for (auto& [socket, c] : connections_) {
                socket->disconnect();
                abortSocket(socket);
                delete socket;
            }
            connections_.clear();
            live_.clear();
            delete server_;
            server_ = nullptr;
            delete local_; // closing removes the socket file
            local_ = nullptr;
            worker_->deleteLater(); // when the thread finishes; it is this call's context
        },
        Qt::BlockingQueuedConnection);
    thread_.quit();
    thread_.wait();
    worker_ = nullptr;
    port_ = 0;
    path_.clear();
}

void TelemetryServer::accept(QIODevice* socket, const QString& peer, bool tcp) {
    std::size_t strangers = 0;
    for (const auto& [s, c] : connections_)
        strangers += !c->hello;
    auto connection = std::make_unique<Connection>();
    connection->peer = peer;
    connections_[socket] = std::move(connection);
    if (strangers >= kStrangers) {
        refuse(socket, "too many connections waiting to say hello");
        return;
    }
    QObject::connect(socket, &QIODevice::readyRead, socket, [this, socket] { readFrom(socket); });
    if (tcp)
        QObject::connect(static_cast<QTcpSocket*>(socket), &QTcpSocket::disconnected, socket,
                         [this, socket] { closed(socket); });
    else
        QObject::connect(static_cast<QLocalSocket*>(socket), &QLocalSocket::disconnected, socket,
                         [this, socket] { closed(socket); });
    QTimer::singleShot(kHelloMilliseconds, socket, [this, socket] {
        const auto it = connections_.find(socket);
        if (it != connections_.end() && !it->second->hello)
            refuse(socket, "no hello within 10 s");
    });
}

void TelemetryServer::refuse(QIODevice* socket, const std::string& why) {
    const auto it = connections_.find(socket);
    const QString peer = it != connections_.end() ? it->second->peer : QString();
    connections_.erase(socket);
    socket->disconnect();
    abortSocket(socket);
    socket->deleteLater();
    if (run_->refused())
        emit changed();
    emit refusedConnection(peer, QString::fromStdString(why));
}

void TelemetryServer::readFrom(QIODevice* socket) {
    const auto it = connections_.find(socket);
    if (it == connections_.end())
        return;
    Connection& c = *it->second;
    const QByteArray bytes = socket->readAll();
    std::size_t begin = 0;
    const std::string_view data(bytes.constData(), std::size_t(bytes.size()));
    while (begin < data.size()) {
        const std::size_t nl = data.find('\n', begin);
        const std::size_t end = nl == std::string_view::npos ? data.size() : nl;
        if (!c.overlong) {
            c.pending.append(data.substr(begin, end - begin));
            if (!c.hello && c.pending.size() > kHelloBytes) {
                refuse(socket, "a first line longer than a hello");
                return;
            }
            if (c.pending.size() > watch::kMaxEventBytes) {
                c.pending.clear();
                c.overlong = true; // the rest of this line is skipped, never held
            }
        }
        if (nl == std::string_view::npos)
            break;
        const bool whole = !c.overlong;
        c.overlong = false;
        begin = nl + 1;
        if (whole) {
            const std::string line = std::move(c.pending);
            c.pending.clear();
            handleLine(socket, c, line);
            if (!connections_.count(socket))
                return; // refused and closed: `c` is gone
        }
        c.pending.clear();
    }
}

void TelemetryServer::handleLine(QIODevice* socket, Connection& c, const std::string& line) {
    std::string why;
    const std::optional<nlohmann::json> event = watch::parseEventLine(line, &why);
    if (!c.hello) {
        if (event)
            c.hello = watch::acceptHello(*event, token_.toStdString(), &why);
        if (!c.hello)
            refuse(socket, why);
        else
            ++live_[c.hello->rank];
        return;
    }
    if (!event)
        return; // an unreadable line costs that line only
    if (!numbers_.isNew(*c.hello, *event)) {
        run_->repeated();
        return;
    }
    if (run_->add(*event))
        emit changed();
}

void TelemetryServer::closed(QIODevice* socket) {
    const auto it = connections_.find(socket);
    if (it == connections_.end())
        return;
    const std::optional<watch::Hello> hello = it->second->hello;
    connections_.erase(it);
    socket->deleteLater();
    // A rank is gone when its last connection is (an old one may close after a new one opened).
    if (hello && --live_[hello->rank] == 0 && run_->connectionClosed(hello->rank))
        emit changed();
}

} // namespace shardscope
