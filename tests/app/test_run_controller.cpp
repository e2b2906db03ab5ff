// RunController when its helpers misbehave, with stand-ins for Slurm's commands and for ssh on
// PATH: a controller that cannot be reached for a moment does not end a job, a cancelled job is
// not a finished one, Kill reaches scancel, and a missing or hanging ssh neither sticks the
// controller in its checks nor starts anything.
#include "cpu_session.h"
#include "run/run_controller.h"

#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QtTest>

namespace shardscope {

using State = RunController::State;

class TestRunController : public QObject {
    Q_OBJECT

private:
    QTemporaryDir dir_;
    QByteArray path_;

    QString bin() const { return dir_.path() + "/bin"; }
    void script(const QString& name, const QByteArray& body) {
        QFile f(bin() + "/" + name);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("#!/bin/sh\n" + body);
        f.close();
        f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    }
    // What the stand-in scontrol says next: a job state line, or FAIL (slurmctld unreachable).
    void slurmSays(const QByteArray& what) {
        QFile f(dir_.path() + "/state");
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(what);
    }
    qint64 calls() const { return QFileInfo(dir_.path() + "/scontrol.calls").size(); }
    Session slurmSession() const {
        Session s = test::cpuSession(dir_.path() + "/runs", 4);
        s.launch.target = LaunchTarget::Slurm;
        return s;
    }

private slots:
    void initTestCase() {
        QVERIFY(QDir().mkpath(bin()));
        const QByteArray state = (dir_.path() + "/state").toUtf8();
        script("sbatch", "echo 4242\n");
        script("scontrol", "echo >> '" + (dir_.path() + "/scontrol.calls").toUtf8() +
                               "'\ns=$(cat '" + state +
                               "')\nif [ \"$s\" = FAIL ]; then echo 'slurm_load_jobs error: "
                               "Socket timed out' >&2; exit 1; fi\necho \"JobId=4242 $s\"\n");
        script("scancel", "echo \"$@\" >> '" + (dir_.path() + "/scancel.log").toUtf8() + "'\n");
        path_ = qgetenv("PATH");
        qputenv("PATH", bin().toUtf8() + ":" + path_);
    }
    void cleanupTestCase() { qputenv("PATH", path_); }

    void aControllerThatCannotBeReachedDoesNotEndTheJob() {
        slurmSays("FAIL");
        LiveRun live;
        RunController run(&live);
        run.setEngine(SHARDSCOPE_ENGINE_EXE);
        run.start(slurmSession(), "flaky");
        QTRY_COMPARE_WITH_TIMEOUT(run.slurmJob(), QString("4242"), 60000);
        QTRY_VERIFY_WITH_TIMEOUT(run.log().contains("could not say how job 4242 is"), 10000);
        const qint64 before = calls();
        QTRY_VERIFY_WITH_TIMEOUT(calls() >= before + 4, 20000); // four more failing polls
        QVERIFY(run.state() == State::Starting);
        slurmSays("JobState=RUNNING ExitCode=0:0");
        const qint64 running = calls();
        QTRY_VERIFY_WITH_TIMEOUT(calls() >= running + 2, 20000);
        QVERIFY(run.state() == State::Starting);
        slurmSays("JobState=COMPLETED ExitCode=0:0");
        QTRY_VERIFY_WITH_TIMEOUT(run.state() == State::Finished, 10000);
    }

    void aCancelledJobIsNotAFinishedOneAndKillReachesScancel() {
        slurmSays("JobState=RUNNING ExitCode=0:0");
        LiveRun live;
        RunController run(&live);
        run.setEngine(SHARDSCOPE_ENGINE_EXE);
        run.start(slurmSession(), "cancelled");
        QTRY_COMPARE_WITH_TIMEOUT(run.slurmJob(), QString("4242"), 60000);
        run.kill();
        QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(dir_.path() + "/scancel.log"), 10000);
        QFile log(dir_.path() + "/scancel.log");
        QVERIFY(log.open(QIODevice::ReadOnly));
        QCOMPARE(log.readAll().trimmed(), QByteArray("4242"));
        slurmSays("JobState=CANCELLED ExitCode=0:15");
        QTRY_VERIFY_WITH_TIMEOUT(run.state() == State::Failed, 10000);
        QVERIFY2(run.message().contains("CANCELLED") && run.message().contains("signal 15"),
                 qPrintable(run.message()));
    }

    void aMissingSshFailsTheChecksWithWhatToInstall() {
        Session s = test::cpuSession(dir_.path() + "/runs", 4);
        s.launch.target = LaunchTarget::Ssh;
        s.launch.hostfile = "node-elsewhere slots=4";
        qputenv("PATH", bin().toUtf8()); // no ssh here
        LiveRun live;
        RunController run(&live);
        run.setEngine(SHARDSCOPE_ENGINE_EXE);
        run.start(s, "nossh");
        QTRY_VERIFY_WITH_TIMEOUT(run.state() == State::Failed, 60000);
        qputenv("PATH", bin().toUtf8() + ":" + path_);
        QVERIFY2(run.message().contains("openssh-client"), qPrintable(run.message()));
    }

    void killDuringAHangingCheckCancelsIt() {
        script("ssh", "exec sleep 600\n"); // a host that never answers
        Session s = test::cpuSession(dir_.path() + "/runs", 4);
        s.launch.target = LaunchTarget::Ssh;
        s.launch.hostfile = "node-elsewhere slots=4";
        LiveRun live;
        RunController run(&live);
        run.setEngine(SHARDSCOPE_ENGINE_EXE);
        run.start(s, "hanging");
        QTRY_VERIFY_WITH_TIMEOUT(run.message().contains("checking the engine on 1 host"), 60000);
        run.kill();
        QVERIFY(run.state() == State::Failed);
        QVERIFY2(run.message().contains("nothing was started"), qPrintable(run.message()));
        QFile::remove(bin() + "/ssh");
    }
};

} // namespace shardscope

QTEST_MAIN(shardscope::TestRunController)
#include "test_run_controller.moc"
