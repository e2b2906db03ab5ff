// Launching through Slurm, for real: the test starts a one-node Slurm (munge, slurmctld and
// slurmd from Debian's slurm-wlm; tests/app/hosts/one_node_slurm.sh). The controller writes the
// sbatch script, submits it, follows the job with scontrol, receives every rank's telemetry and
// stops the job through scancel --signal=USR1. Skips, saying why, where Slurm cannot run.
#include "cpu_session.h"
#include "pages/monitor_page.h"
#include "session_document.h"

#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace shardscope {

using State = RunController::State;

class TestLaunchSlurm : public QObject {
    Q_OBJECT

private:
    QTemporaryDir dir_;
    bool up_ = false;

    QString script() const {
        return QString(SHARDSCOPE_SOURCE_DIR) + "/tests/app/hosts/one_node_slurm.sh";
    }

    struct Fixture {
        SessionDocument doc;
        MonitorPage page{&doc};
        Fixture(const QString& runs, std::int64_t steps) {
            Session s = test::cpuSession(runs, steps);
            s.launch.target = LaunchTarget::Slurm;
            s.launch.slurmTime = "10:00";
            doc.reset(s);
            page.controller()->setEngine(SHARDSCOPE_ENGINE_EXE);
        }
        RunController* run() { return page.controller(); }
    };

private slots:
    void initTestCase() {
        QProcess up;
        up.start(script(), {"up", dir_.path() + "/slurm"});
        QVERIFY(up.waitForFinished(120000));
        if (up.exitCode() == 77)
            QSKIP(qPrintable("no Slurm: " + QString::fromLocal8Bit(up.readAllStandardError())));
        QVERIFY2(up.exitCode() == 0, up.readAllStandardError().constData());
        const QString conf =
            QString::fromLocal8Bit(up.readAllStandardOutput()).trimmed().split('\n').last();
        qputenv("SLURM_CONF", conf.section('=', 1).toLocal8Bit()); // for sbatch, scontrol, scancel
        up_ = true;
    }

    void cleanupTestCase() {
        if (up_)
            QProcess::execute(script(), {"down", dir_.path() + "/slurm"});
    }

    void aJobIsSubmittedFollowedAndStreamsEveryRank() {
        Fixture f(dir_.path() + "/runs", 8);
        f.run()->start(f.doc.session());
        QTRY_VERIFY_WITH_TIMEOUT(
            !f.run()->slurmJob().isEmpty() || f.run()->state() == State::Failed, 60000);
        QVERIFY2(f.run()->state() != State::Failed, qPrintable(f.run()->log()));
        const QString script = f.run()->slurmScriptText();
        QVERIFY(script.contains("#SBATCH --ntasks=4"));
        QVERIFY(script.contains("#SBATCH --time=10:00"));
        QVERIFY(script.contains("'srun' '--mpi=pmix'"));
        QVERIFY(
            !script.contains(f.run()->token()));  // the job inherits it from sbatch's environment
        QVERIFY(f.run()->log().contains(script)); // shown before it is submitted
        QTRY_VERIFY_WITH_TIMEOUT(
            f.run()->state() == State::Finished || f.run()->state() == State::Failed, 240000);
        QVERIFY2(f.run()->state() == State::Finished, qPrintable(f.run()->message()));
        f.page.refreshNow();
        QCOMPARE(int(f.page.data().ranks.size()), 4);
        for (const auto& r : f.page.data().ranks)
            QCOMPARE(r.step, 8);
    }

    void stopReachesEveryRankThroughScancel() {
        Fixture f(dir_.path() + "/runs", 100000);
        f.run()->start(f.doc.session());
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                f.page.refreshNow();
                return f.run()->state() == State::Running && f.page.data().latestStep >= 2;
            }(),
            240000);
        f.run()->stop();
        QTRY_VERIFY_WITH_TIMEOUT(
            f.run()->state() == State::Finished || f.run()->state() == State::Failed, 240000);
        QVERIFY2(f.run()->state() == State::Finished, qPrintable(f.run()->message()));
        f.page.refreshNow();
        for (const watch::RankHealth& h : f.page.data().analysis.health)
            QVERIFY2(h.detail.find("interrupted") != std::string::npos, h.detail.c_str());
        QVERIFY(QFileInfo(f.run()->runDirectory() + "/checkpoints").isDir());
    }
};

} // namespace shardscope

QTEST_MAIN(shardscope::TestLaunchSlurm)
#include "test_launch_slurm.moc"
