// The app's end of the telemetry stream: listens (loopback by default, or a Unix socket for the
// ranks of a local run, which live in a network namespace of their own), accepts a connection
// only when its first line is a hello with the run's token, parses every later line with the
// limits of engine/watch, drops events it has already seen, and writes the rest into a LiveRun.
// Lives on a worker thread (start() moves it there); the GUI learns of new data through the
// queued changed() signal, emitted at most once until the GUI has read the LiveRun.
#pragma once

#include "live_run.h"
#include "watch/stream_protocol.h"

#include <QHostAddress>
#include <QObject>
#include <QString>
#include <QThread>
#include <functional>
#include <map>
#include <memory>

class QIODevice;
class QLocalServer;
class QTcpServer;

namespace shardscope {

class TelemetryServer : public QObject {
    Q_OBJECT
public:
    // `run` outlives the server.
    TelemetryServer(LiveRun* run, QObject* parent = nullptr);
    ~TelemetryServer() override;

    // Starts the worker thread and listens on `address:port` (0: any free port) for connections
    // that present `token`. Blocks until listening or failed; returns the port, or 0 with *error.
    quint16 start(const QHostAddress& address, quint16 port, const QString& token, QString* error);
    // The same on a Unix socket created at `path` (readable and writable by this user only, and
    // removed by stop()). Returns false with *error.
    bool startLocal(const QString& path, const QString& token, QString* error);
    // Closes every connection and stops the thread (also done by the destructor).
    void stop();
    quint16 port() const { return port_; }      // 0 unless listening on TCP
    QString localPath() const { return path_; } // empty unless listening on a Unix socket

signals:
    void changed(); // new data in the LiveRun (queued to the GUI)
    void refusedConnection(const QString& peer, const QString& reason);

private:
    struct Connection;
    // Starts the thread and runs `listen` there; it returns "" or why it could not listen.
    bool begin(const QString& token, const std::function<QString()>& listen, QString* error);
    QString listenHere(const QHostAddress& address, quint16 port);
    QString listenLocal(const QString& path);
    void accept(QIODevice* socket, const QString& peer, bool tcp);
    void readFrom(QIODevice* socket);
    void closed(QIODevice* socket);
    void handleLine(QIODevice* socket, Connection& c, const std::string& line);
    void refuse(QIODevice* socket, const std::string& why); // closes and counts it

    LiveRun* run_;
    QString token_;
    QThread thread_;
    QObject* worker_ = nullptr;     // lives in thread_: the context of its calls
    QTcpServer* server_ = nullptr;  // in thread_
    QLocalServer* local_ = nullptr; // in thread_
    std::map<QIODevice*, std::unique_ptr<Connection>> connections_; // in thread_
    watch::EventNumbers numbers_;                                   // in thread_
    std::map<int, int> live_; // in thread_: connections per rank that said hello
    quint16 port_ = 0;
    QString path_;
};

} // namespace shardscope
