// Launching on hosts over ssh, for real: a second host is a network namespace with its own
// address, host name and Debian's sshd (tests/app/hosts/two_hosts.sh, started here). The Monitor
// page's controller checks each host's engine over ssh, starts mpirun with ssh as its agent, and
// receives the remote ranks' telemetry through an ssh reverse tunnel. Host names and paths with
// shell metacharacters run nothing. Skips, saying why, where the host cannot be made (not root).
#include "cpu_session.h"
#include "pages/monitor_page.h"
#include "session_document.h"

#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace shardscope {

namespace {

using test::cpuSession;

using State = RunController::State;

} // namespace

class TestLaunchHosts : public QObject {
    Q_OBJECT

private:
    QTemporaryDir dir_;
    QString hostA_, hostB_, sshOptions_, network_;
    bool up_ = false;

    QString script() const {
        return QString(SHARDSCOPE_SOURCE_DIR) + "/tests/app/hosts/two_hosts.sh";
    }

    Session hostsSession(std::int64_t steps) const {
        Session s = cpuSession(dir_.path() + "/runs", steps);
        s.launch.target = LaunchTarget::Ssh;
        s.launch.hostfile = QString("%1 slots=2\n%2 slots=2\n").arg(hostA_, hostB_).toStdString();
        s.launch.sshOptions = sshOptions_.toStdString();
        // Keep MPI on the two hosts' link: the machine's other interfaces do not reach host B.
        s.launch.mpiOptions = QString("--mca btl_tcp_if_include %1 --mca oob_tcp_if_include %1")
                                  .arg(network_)
                                  .toStdString();
        return s;
    }

    struct Fixture {
        SessionDocument doc;
        MonitorPage page{&doc};
        explicit Fixture(const Session& s) {
            doc.reset(s);
            page.controller()->setEngine(SHARDSCOPE_ENGINE_EXE);
        }
        RunController* run() { return page.controller(); }
    };

private slots:
    void initTestCase() {
        QProcess up;
        up.start(script(), {"up", dir_.path() + "/hosts"});
        QVERIFY(up.waitForFinished(60000));
        if (up.exitCode() == 77)
            QSKIP(
                qPrintable("no second host: " + QString::fromLocal8Bit(up.readAllStandardError())));
        QVERIFY2(up.exitCode() == 0, up.readAllStandardError().constData());
        const QStringList words = QString::fromLocal8Bit(up.readAllStandardOutput())
                                      .trimmed()
                                      .split('\n')
                                      .last()
                                      .split(' ');
        hostA_ = words[0];
        hostB_ = words[1];
        sshOptions_ = words.mid(2).join(' ');
        network_ = hostA_.section('.', 0, 2) + ".0/24";
        up_ = true;
    }

    void cleanupTestCase() {
        if (up_)
            QProcess::execute(script(), {"down", dir_.path() + "/hosts"});
    }

    void aTwoHostJobRunsOverSshAndStreamsFromBothHosts() {
        Fixture f(hostsSession(8));
        f.run()->start(f.doc.session());
        QTRY_VERIFY_WITH_TIMEOUT(
            f.run()->state() == State::Finished || f.run()->state() == State::Failed, 240000);
        QVERIFY2(f.run()->state() == State::Finished, qPrintable(f.run()->log()));
        // Each host's engine was checked over ssh before any rank started.
        QVERIFY2(f.run()->log().contains("host " + hostB_ + ": shardscope-engine"),
                 qPrintable(f.run()->log()));
        f.page.refreshNow();
        const MonitorData& d = f.page.data();
        QCOMPARE(int(d.ranks.size()), 4);
        int remote = 0;
        for (const auto& r : d.ranks) {
            QCOMPARE(r.step, 8); // every step of every rank arrived live
            remote += r.host == "shardscope-host-b";
        }
        QCOMPARE(remote, 2); // through the reverse tunnel
        QVERIFY(!f.run()->log().contains(f.run()->token()));
    }

    void hostNamesAndPathsWithShellMetacharactersRunNothing() {
        const QString witness = dir_.path() + "/injected";
        for (const QString& host : {hostB_ + ";touch " + witness, "$(touch " + witness + ")",
                                    "-oProxyCommand=touch" + witness}) {
            Session s = hostsSession(4);
            s.launch.hostfile = (host + " slots=4\n").toStdString();
            Fixture f(s);
            f.run()->start(f.doc.session());
            QTRY_VERIFY_WITH_TIMEOUT(f.run()->state() == State::Failed, 60000);
            QVERIFY2(f.run()->message().contains("line 1"), qPrintable(f.run()->message()));
        }
        // A path on the host is quoted for the remote shell: it is looked for, not run.
        Session s = hostsSession(4);
        s.launch.remoteEngine = ("$(touch " + witness + ")").toStdString();
        Fixture f(s);
        f.run()->start(f.doc.session());
        QTRY_VERIFY_WITH_TIMEOUT(f.run()->state() == State::Failed, 60000);
        QVERIFY2(f.run()->message().contains("cannot run"), qPrintable(f.run()->message()));
        QVERIFY(!QFileInfo::exists(witness));
    }

    void aHostWithAnotherEngineVersionIsNamedWithWhatToInstall() {
        const QString fake = dir_.path() + "/old-engine";
        QFile script(fake);
        QVERIFY(script.open(QIODevice::WriteOnly));
        script.write("#!/bin/sh\necho "
                     "'{\"version\":\"0.0.9\",\"telemetry_schema\":1,\"backends\":[\"cpu\"]}'\n");
        script.close();
        script.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
        Session s = hostsSession(4);
        s.launch.remoteEngine = fake.toStdString();
        Fixture f(s);
        f.run()->start(f.doc.session());
        QTRY_VERIFY_WITH_TIMEOUT(f.run()->state() == State::Failed, 60000);
        const QString message = f.run()->message();
        QVERIFY2(message.contains("has shardscope-engine 0.0.9"), qPrintable(message));
        QVERIFY2(message.contains("install shardscope-engine"), qPrintable(message));
        QCOMPARE(f.page.live()->events(), 0); // no rank started
    }
};

} // namespace shardscope

QTEST_MAIN(shardscope::TestLaunchHosts)
#include "test_launch_hosts.moc"
