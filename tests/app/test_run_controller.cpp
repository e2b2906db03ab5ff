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

    // Under Slurm srun's notice is in the job's output file, read when the job has failed.
    void srunsNoticeInTheJobsOutputNamesTheDeadRank() {
        slurmSays("JobState=RUNNING ExitCode=0:0");
        LiveRun live;
        RunController run(&live);
        run.setEngine(SHARDSCOPE_ENGINE_EXE);
        run.start(slurmSession(), "srun-lost");
        QTRY_COMPARE_WITH_TIMEOUT(run.slurmJob(), QString("4242"), 60000);
        QFile out(run.runDirectory() + ".slurm-4242.out");
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write("step 3\nsrun: error: node-9: task 2: Killed\nsrun: error: node-1: task 0: "
                  "Exited with exit code 5\n");
        out.close();
        slurmSays("JobState=FAILED ExitCode=0:9");
        QTRY_VERIFY_WITH_TIMEOUT(run.state() == State::Failed, 20000);
        std::map<int, watch::LauncherNotice> notices;
        live.read([&](const watch::RunState& state) { notices = state.launcherNotices(); });
        QCOMPARE(int(notices.size()), 1);
        QCOMPARE(notices.begin()->first, 2);
        QCOMPARE(notices.begin()->second.host, std::string("node-9"));
        QFile::remove(out.fileName());
    }

    // A rank on another host dies: the survivors' watchdogs cannot see it, so the launcher's
    // notice (its line arriving in pieces) names it in the monitor.
    void theLaunchersNoticeOfADeadRankNamesIt() {
        script("stand-in-engine",
               "case \"$*\" in *--check*) echo ok; exit 0;; esac\n"
               "printf 'mpirun noticed that process rank 1 with PID 0 on no' >&2\n"
               "sleep 0.3\n"
               "printf 'de far-host exited on signal 9 (Killed).\\n' >&2\n"
               "exit 137\n");
        LiveRun live;
        RunController run(&live);
        run.setEngine(bin() + "/stand-in-engine");
        run.start(test::cpuSession(dir_.path() + "/runs", 4), "lost-rank");
        QTRY_VERIFY_WITH_TIMEOUT(run.state() == State::Failed, 30000);
        std::map<int, watch::LauncherNotice> notices;
        live.read([&](const watch::RunState& state) { notices = state.launcherNotices(); });
        QCOMPARE(int(notices.size()), 1);
        QCOMPARE(notices.begin()->first, 1);
        QCOMPARE(notices.begin()->second.host, std::string("far-host"));
        QCOMPARE(notices.begin()->second.how, std::string("signal 9 (Killed)"));
    }
};

} // namespace shardscope

QTEST_MAIN(shardscope::TestRunController)
#include "test_run_controller.moc"
