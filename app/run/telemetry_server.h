// The app's end of the telemetry stream: listens (loopback by default), accepts a connection
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
#include <map>
#include <memory>

class QTcpServer;
class QTcpSocket;

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
    // Closes every connection and stops the thread (also done by the destructor).
    void stop();
    quint16 port() const { return port_; }

signals:
    void changed(); // new data in the LiveRun (queued to the GUI)
    void refusedConnection(const QString& peer, const QString& reason);

private:
    struct Connection;
    void listenHere(const QHostAddress& address, quint16 port, QString* error);
    void accept();
    void readFrom(QTcpSocket* socket);
    void closed(QTcpSocket* socket);
    void handleLine(QTcpSocket* socket, Connection& c, const std::string& line);
    void refuse(QTcpSocket* socket, const std::string& why); // closes and counts it

    LiveRun* run_;
    QString token_;
    QThread thread_;
    QObject* worker_ = nullptr;    // lives in thread_: the context of its calls
    QTcpServer* server_ = nullptr; // in thread_
    std::map<QTcpSocket*, std::unique_ptr<Connection>> connections_; // in thread_
    watch::EventNumbers numbers_;                                    // in thread_
    std::map<int, int> live_; // in thread_: connections per rank that said hello
    quint16 port_ = 0;
};

} // namespace shardscope
