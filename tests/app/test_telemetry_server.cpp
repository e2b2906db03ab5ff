// TelemetryServer over real sockets: ranks that say hello with the token are heard, strangers
// are refused and counted (a wrong token, a first line longer than a hello, silence, too many at
// once), events seen before are dropped, and a rank that reconnects is not taken for dead.
#include "run/telemetry_server.h"

#include <QFileInfo>
#include <QLocalSocket>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>
#include <memory>
#include <nlohmann/json.hpp>

namespace shardscope {

using nlohmann::json;

namespace {

std::unique_ptr<QTcpSocket> connectTo(quint16 port) {
    auto s = std::make_unique<QTcpSocket>();
    s->connectToHost(QHostAddress::LocalHost, port);
    s->waitForConnected(5000);
    return s;
}

void send(QIODevice& s, const json& line) {
    const std::string text = line.dump() + "\n";
    s.write(text.data(), qint64(text.size()));
    s.waitForBytesWritten(5000);
}

json hello(int rank, const std::string& token, const std::string& session = "p1") {
    return {{"type", "hello"}, {"v", 2}, {"rank", rank}, {"session", session}, {"token", token}};
}

json step(int rank, int step, int seq) {
    return {{"type", "step"}, {"rank", rank}, {"step", step}, {"seq", seq}, {"t", double(step)}};
}

std::int64_t lastStep(LiveRun& live, int rank) {
    std::int64_t s = -1;
    live.read([&](const watch::RunState& run) {
        if (const watch::RankState* r = run.rank(rank))
            s = r->lastStep();
    });
    return s;
}

} // namespace

class TestTelemetryServer : public QObject {
    Q_OBJECT
private slots:
    void aLocalRunsUnixSocketHearsRanksRefusesStrangersAndIsRemovedOnStop() {
        QTemporaryDir dir;
        const QString path = dir.filePath("telemetry.sock");
        LiveRun live;
        TelemetryServer server(&live);
        QString error;
        QVERIFY2(server.startLocal(path, "tok", &error), qPrintable(error));
        QCOMPARE(server.localPath(), path);
        QCOMPARE(server.port(), quint16(0));
        // Only this user may connect (the token guards the rest).
        QCOMPARE(QFileInfo(path).permissions() &
                     (QFile::ReadOther | QFile::WriteOther | QFile::ReadGroup | QFile::WriteGroup),
                 QFile::Permissions());
        QLocalSocket rank, stranger;
        rank.connectToServer(path);
        QVERIFY(rank.waitForConnected(5000));
        send(rank, hello(2, "tok"));
        send(rank, step(2, 1, 2));
        send(rank, step(2, 2, 3));
        stranger.connectToServer(path);
        QVERIFY(stranger.waitForConnected(5000));
        send(stranger, hello(0, "guess"));
        QTRY_COMPARE_WITH_TIMEOUT(lastStep(live, 2), std::int64_t(2), 5000);
        QTRY_COMPARE_WITH_TIMEOUT(live.refusedConnections(), std::int64_t(1), 5000);
        // A rank whose socket closes without an end event is noticed.
        rank.disconnectFromServer();
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                bool gone = false;
                live.read([&](const watch::RunState& run) {
                    gone = run.rank(2) && run.rank(2)->disconnected;
                });
                return gone;
            }(),
            5000);
        server.stop();
        QVERIFY(!QFileInfo::exists(path));
        QVERIFY(server.localPath().isEmpty());
    }

    void ranksWithTheTokenAreHeardAndRepeatsDropped() {
        LiveRun live;
        TelemetryServer server(&live);
        QString error;
        const quint16 port = server.start(QHostAddress::LocalHost, 0, "tok", &error);
        QVERIFY2(port > 0, qPrintable(error));
        auto rank = connectTo(port);
        send(*rank, hello(3, "tok"));
        send(*rank, step(3, 1, 2));
        send(*rank, step(3, 1, 2)); // the same event again
        send(*rank, step(3, 2, 3));
        QTRY_COMPARE_WITH_TIMEOUT(lastStep(live, 3), std::int64_t(2), 5000);
        QTRY_COMPARE_WITH_TIMEOUT(live.repeatedEvents(), std::int64_t(1), 5000);
        QCOMPARE(live.refusedConnections(), std::int64_t(0));
    }

    void strangersAreRefusedAndCounted() {
        LiveRun live;
        TelemetryServer server(&live);
        QString error;
        const quint16 port = server.start(QHostAddress::LocalHost, 0, "tok", &error);
        auto wrong = connectTo(port);
        send(*wrong, hello(0, "guess"));
        auto rambling = connectTo(port); // 8 KiB without a line break, never a hello
        rambling->write(QByteArray(8192, '{'));
        rambling->waitForBytesWritten(5000);
        auto noHello = connectTo(port);
        send(*noHello, step(0, 1, 1));
        QTRY_COMPARE_WITH_TIMEOUT(live.refusedConnections(), std::int64_t(3), 5000);
        QTRY_VERIFY_WITH_TIMEOUT(wrong->state() == QAbstractSocket::UnconnectedState, 5000);
        QCOMPARE(lastStep(live, 0), std::int64_t(-1)); // nothing they said was kept

        // Strangers that say nothing are let go after 10 s; past 64 at once, at the door.
        std::vector<std::unique_ptr<QTcpSocket>> silent;
        for (int i = 0; i < 70; ++i)
            silent.push_back(connectTo(port));
        QTRY_VERIFY_WITH_TIMEOUT(live.refusedConnections() >= 3 + 6, 5000);
        QTRY_VERIFY_WITH_TIMEOUT(live.refusedConnections() >= 3 + 70, 20000);
        // Then a rank gets in.
        auto rank = connectTo(port);
        send(*rank, hello(0, "tok"));
        send(*rank, step(0, 5, 2));
        QTRY_COMPARE_WITH_TIMEOUT(lastStep(live, 0), std::int64_t(5), 5000);
    }

    void aRankThatReconnectsIsNotDead() {
        LiveRun live;
        TelemetryServer server(&live);
        QString error;
        const quint16 port = server.start(QHostAddress::LocalHost, 0, "tok", &error);
        auto first = connectTo(port);
        send(*first, hello(1, "tok"));
        send(*first, step(1, 1, 2));
        QTRY_COMPARE_WITH_TIMEOUT(lastStep(live, 1), std::int64_t(1), 5000);
        // The new connection opens before the old one is seen closing.
        auto second = connectTo(port);
        send(*second, hello(1, "tok"));
        send(*second, step(1, 2, 3));
        QTRY_COMPARE_WITH_TIMEOUT(lastStep(live, 1), std::int64_t(2), 5000);
        first->disconnectFromHost();
        first.reset();
        bool disconnected = true;
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                live.read(
                    [&](const watch::RunState& run) { disconnected = run.rank(1)->disconnected; });
                return !disconnected;
            }(),
            5000);
        // When the last one closes, the rank is gone.
        second->disconnectFromHost();
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                live.read(
                    [&](const watch::RunState& run) { disconnected = run.rank(1)->disconnected; });
                return disconnected;
            }(),
            5000);
    }
};

} // namespace shardscope

QTEST_MAIN(shardscope::TestTelemetryServer)
#include "test_telemetry_server.moc"
