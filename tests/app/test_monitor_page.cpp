// The Monitor page with real runs: the Start button's code launches the engine on 4 MPI ranks
// (dp 2 x pp 2) on this machine, the page receives their telemetry over a real socket and shows
// every rank; a connection without the run's token is refused and counted; a rank stopped with
// SIGSTOP is shown silent, and the ranks waiting for it blocked in their operations, before the
// run ends; Stop ends the job cleanly; a killed rank is shown dead.
#include "calculator_panel.h"
#include "core/json_io.h"
#include "cpu_session.h"
#include "live_plot.h"
#include "pages/monitor_page.h"
#include "session_document.h"

#include <QDir>
#include <QLocalSocket>
#include <QPushButton>
#include <QStandardItemModel>
#include <QTemporaryDir>
#include <QtTest>
#include <csignal>
#include <nlohmann/json.hpp>

namespace shardscope {

namespace {

using test::cpuSession;

using State = RunController::State;

} // namespace

class TestMonitorPage : public QObject {
    Q_OBJECT

private:
    QTemporaryDir runs_;

    // A page with the engine of this build, its document holding `session`.
    struct Fixture {
        SessionDocument doc;
        MonitorPage page{&doc};
        Fixture(const Session& s) {
            doc.reset(s);
            page.controller()->setEngine(SHARDSCOPE_ENGINE_EXE);
            page.resize(1400, 900);
        }
        // Read from the run's state directly: cheap enough to poll every few milliseconds.
        bool runningWithSteps(int steps) {
            if (page.controller()->state() != State::Running)
                return false;
            bool all = false;
            page.live()->read([&](const watch::RunState& run) {
                all = run.ranks().size() == 4;
                for (const auto& [id, r] : run.ranks())
                    all = all && r.lastStep() >= steps;
            });
            return all;
        }
        watch::RankHealth health(int rank) {
            std::vector<watch::RankHealth> h;
            page.live()->read([&](const watch::RunState& run) {
                h = watch::rankHealth(run, {5.0, page.live()->now()});
            });
            return h.at(std::size_t(rank));
        }
        // Some rank says which operation it is blocked in.
        bool someoneBlockedIn() {
            bool blocked = false;
            for (int r = 0; r < 4; ++r) {
                const watch::RankHealth h = health(r);
                blocked |= h.status == watch::RankStatus::Stalled &&
                           h.detail.find("blocked in ") != std::string::npos;
            }
            return blocked;
        }
        // What the controller says and the end of its log, for a failure's message.
        QByteArray why() const {
            const RunController& c = *const_cast<MonitorPage&>(page).controller();
            return (toString(c.state()) + ": " + c.message() + "\n" + c.log().right(1500)).toUtf8();
        }
        long pidOf(int rank) {
            long pid = 0;
            page.live()->read([&](const watch::RunState& run) { pid = run.rank(rank)->pid; });
            return pid;
        }
    };

private slots:
    void aFourRankRunIsLaunchedAndEveryRankShownBesideThePlan() {
        Fixture f(cpuSession(runs_.path(), 12));
        QTest::mouseClick(f.page.findChild<QPushButton*>("start"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() != State::Checking,
                                  f.why().constData(), 60000);

        // While it runs, a stranger without the token is turned away and counted.
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() != State::Starting,
                                  f.why().constData(), 120000);
        // A local run's ranks report through a socket file, in a network of their own.
        QVERIFY2(f.page.controller()->telemetryUrl().startsWith("unix:"),
                 qPrintable(f.page.controller()->telemetryUrl()));
        QLocalSocket stranger;
        stranger.connectToServer(f.page.controller()->telemetrySocket());
        QVERIFY(stranger.waitForConnected(5000));
        stranger.write("{\"type\":\"hello\",\"rank\":0,\"token\":\"guess\"}\n");
        QVERIFY(stranger.waitForBytesWritten(5000));
        QTRY_COMPARE_WITH_TIMEOUT(f.page.live()->refusedConnections(), 1, 10000);

        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Finished,
                                  f.why().constData(), 180000);
        f.page.refreshNow();
        const MonitorData& d = f.page.data();
        QCOMPARE(int(d.ranks.size()), 4);
        for (const auto& r : d.ranks)
            QCOMPARE(r.step, 12);
        QCOMPARE(f.page.ranksTable()->rowCount(), 4);
        for (int r = 0; r < 4; ++r)
            QCOMPARE(f.page.ranksTable()->item(r, 3)->text(), QString("finished"));
        // The coordinates are Megatron's: rank 1 is the second replica of stage 0.
        QCOMPARE(f.page.ranksTable()->item(1, 1)->text(), QString("dp1 tp0 pp0 cp0"));
        // Parameters, gradients and optimizer state as the planner predicted, to the byte.
        for (const watch::ComparisonRow& row : d.analysis.comparison)
            if (row.key == "memory.parameters" || row.key == "memory.optimizer")
                QCOMPARE(row.errorPercent(), 0.0);
        QVERIFY2(d.analysis.pipeline.ok(), d.analysis.pipeline.problem.c_str());
        QCOMPARE(int(d.analysis.pipeline.measured.ranks.size()), 2);
        QCOMPARE(f.page.throughputPlot()->lineCount(), 4);
        QVERIFY(f.page.throughputPlot()->reference() > 0); // the prediction is drawn
        // The token never appeared on a command line.
        QVERIFY(!f.page.controller()->log().contains(f.page.controller()->token()));
        QVERIFY(QFileInfo(f.page.controller()->runDirectory() + "/summary.json").exists());
    }

    // A model imported from a Hugging Face config.json (Llama 3.1: RMSNorm, rotary positions
    // with Llama 3's scaling, grouped-query attention, SwiGLU), made small in the model's fields
    // as a user would for a CPU, runs from the Start button like the GPT-2 blocks, here with
    // context parallelism: the ranks are shown with their cp coordinate and the ring's exposed
    // time beside the planner's.
    void aLlamaModelImportedFromHuggingFaceRunsFromTheStartButton() {
        Session s = cpuSession(runs_.path() + "/llama", 6);
        s.parallel.pp = 1;
        s.parallel.cp = 2; // dp 2 x cp 2
        const nlohmann::json hf =
            readJsonFile(std::string(SHARDSCOPE_TEST_DATA) + "/hf/llama-3.1-8b.json");
        s.model = modelFromHuggingFace(hf, "Llama 3.1 8B");
        s.modelSource = ModelSource::HuggingFace;
        s.model.layers = 4;
        s.model.hidden = 32;
        s.model.heads = 4;
        s.model.kvHeads = 2;
        s.model.headDim = 0;
        s.model.ffnHidden = 96;
        s.model.vocab = 64;
        s.model.seqLen = 16;
        Fixture f(s);
        QTest::mouseClick(f.page.findChild<QPushButton*>("start"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Finished,
                                  f.why().constData(), 180000);
        f.page.refreshNow();
        const MonitorData& d = f.page.data();
        QCOMPARE(int(d.ranks.size()), 4);
        for (const auto& r : d.ranks)
            QCOMPARE(r.step, 6);
        bool ringShown = false;
        for (const watch::ComparisonRow& row : d.analysis.comparison) {
            if (row.key == "memory.parameters" || row.key == "memory.optimizer")
                QCOMPARE(row.errorPercent(), 0.0);
            if (row.key == "exposed.cp") {
                ringShown = true;
                QVERIFY(row.predicted > 0);
                QVERIFY(row.measured >= 0);
            }
        }
        QVERIFY(ringShown);
        // Megatron's order: tp, cp, dp, pp; rank 1 is the second cp rank of replica 0.
        QCOMPARE(f.page.ranksTable()->item(1, 1)->text(), QString("dp0 tp0 pp0 cp1"));
        QCOMPARE(f.page.ranksTable()->item(2, 1)->text(), QString("dp1 tp0 pp0 cp0"));
        QFile config(f.page.controller()->runDirectory() + "/config.json");
        QVERIFY(config.open(QIODevice::ReadOnly));
        const nlohmann::json written = nlohmann::json::parse(config.readAll().toStdString());
        QCOMPARE(written["model"]["norm"].get<std::string>(), std::string("rmsnorm"));
        QCOMPARE(written["model"]["rope_scaling"]["type"].get<std::string>(),
                 std::string("llama3"));
    }

    void aStoppedRankIsNamedWhileTheOthersSayWhereTheyWaitThenStopEndsCleanly() {
        Fixture f(cpuSession(runs_.path(), 100000));
        QTest::mouseClick(f.page.findChild<QPushButton*>("start"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.runningWithSteps(3), f.why().constData(), 180000);
        const long victim = f.pidOf(1);
        QVERIFY(victim > 0);
        QCOMPARE(::kill(pid_t(victim), SIGSTOP), 0);
        // Within seconds, long before the watchdog (120 s) ends anything.
        QTRY_VERIFY2_WITH_TIMEOUT(f.health(1).status == watch::RankStatus::Silent,
                                  f.why().constData(), 60000);
        QTRY_VERIFY2_WITH_TIMEOUT(f.someoneBlockedIn(), f.why().constData(), 60000);
        f.page.refreshNow();
        const QString verdict = f.page.panel()->verdictText();
        QVERIFY2(verdict.contains("Rank 1 is silent"), qPrintable(verdict));
        QVERIFY2(verdict.contains("blocked"), qPrintable(verdict));
        QVERIFY(f.page.controller()->state() == State::Running);

        ::kill(pid_t(victim), SIGCONT);
        QTRY_VERIFY2_WITH_TIMEOUT(f.health(1).status == watch::RankStatus::Running,
                                  f.why().constData(), 60000);
        QTest::mouseClick(f.page.findChild<QPushButton*>("stop"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Finished,
                                  f.why().constData(), 120000);
        for (int r = 0; r < 4; ++r)
            QVERIFY(f.health(r).status == watch::RankStatus::Finished);
        QVERIFY(f.health(0).detail.find("interrupted") != std::string::npos);
        QVERIFY(f.page.controller()->canResume());
        QVERIFY(f.page.findChild<QPushButton*>("resume")->isEnabled());

        // Resume goes on from the checkpoint the stop wrote, in the same directory.
        std::int64_t stoppedAt = 0;
        f.page.live()->read([&](const watch::RunState& run) { stoppedAt = run.latestStep(); });
        const QString dir = f.page.controller()->runDirectory();
        QTest::mouseClick(f.page.findChild<QPushButton*>("resume"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.runningWithSteps(int(stoppedAt) + 2), f.why().constData(),
                                  180000);
        QCOMPARE(f.page.controller()->runDirectory(), dir);
        f.page.live()->read([&](const watch::RunState& run) {
            QCOMPARE(run.rank(0)->steps[0].step, stoppedAt + 1); // nothing before it again
        });
        QTest::mouseClick(f.page.findChild<QPushButton*>("stop"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Finished,
                                  f.why().constData(), 120000);
    }

    void aKilledRankIsShownDead() {
        Fixture f(cpuSession(runs_.path(), 100000));
        QTest::mouseClick(f.page.findChild<QPushButton*>("start"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.runningWithSteps(2), f.why().constData(), 180000);
        const long victim = f.pidOf(2);
        QCOMPARE(::kill(pid_t(victim), SIGKILL), 0);
        QTRY_VERIFY2_WITH_TIMEOUT(f.health(2).status == watch::RankStatus::Dead,
                                  f.why().constData(), 60000);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Failed,
                                  f.why().constData(), 60000);
        f.page.refreshNow();
        const QString verdict = f.page.panel()->verdictText();
        QVERIFY2(verdict.contains("without an end event"), qPrintable(verdict));
    }

    void runsStartedWithinOneSecondGetTheirOwnDirectories() {
        Fixture f(cpuSession(runs_.path() + "/same-second", 4));
        Session s = f.doc.session();
        s.parallel.tp = 3; // refused by the check, so both start within milliseconds
        f.page.controller()->start(s);
        const QString first = f.page.controller()->runDirectory();
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Failed,
                                  f.why().constData(), 60000);
        QDir().mkpath(first); // as if that run had made it
        f.page.controller()->start(s);
        QVERIFY(f.page.controller()->runDirectory() != first); // "-2" within the same second
    }

    void theEnginesCheckRefusesABadLayoutAndNothingStarts() {
        Session s = cpuSession(runs_.path(), 10);
        s.parallel.tp = 3; // 2 heads cannot be split 3 ways
        s.parallel.dp = 1;
        s.parallel.pp = 1;
        Fixture f(s);
        QTest::mouseClick(f.page.findChild<QPushButton*>("start"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Failed,
                                  f.why().constData(), 60000);
        const QString message = f.page.controller()->message();
        QVERIFY2(message.contains("pre-launch check refused"), qPrintable(message));
        QVERIFY2(message.contains("tp"), qPrintable(message));
        QVERIFY(!QFileInfo::exists(f.page.controller()->runDirectory()));
        QVERIFY(QFileInfo::exists(f.page.controller()->telemetrySocket())); // listened, nobody came
        QCOMPARE(f.page.live()->events(), 0);
    }

    void theExampleCpuSessionPassesTheEnginesCheckAndStarts() {
        Session s = loadSession(SHARDSCOPE_SOURCE_DIR "/docs/sessions/cpu-gpt-dp2-pp2.shardscope");
        s.launch.runsDirectory = runs_.path().toStdString();
        Fixture f(s);
        QTest::mouseClick(f.page.findChild<QPushButton*>("start"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(f.page.controller()->state() == State::Starting ||
                                     f.page.controller()->state() == State::Running ||
                                     f.page.controller()->state() == State::Failed,
                                 60000);
        QVERIFY2(f.page.controller()->state() != State::Failed,
                 qPrintable(f.page.controller()->message()));
        QTest::mouseClick(f.page.findChild<QPushButton*>("kill"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Failed,
                                  f.why().constData(), 60000);
    }

    void aFinishedRunOpensFromItsDirectoryAndReplays() {
        Fixture f(cpuSession(runs_.path(), 8));
        QTest::mouseClick(f.page.findChild<QPushButton*>("start"), Qt::LeftButton);
        QTRY_VERIFY2_WITH_TIMEOUT(f.page.controller()->state() == State::Finished,
                                  f.why().constData(), 180000);
        const QString dir = f.page.controller()->runDirectory();

        SessionDocument doc;
        MonitorPage replay(&doc);
        QCOMPARE(replay.openRun(dir), QString());
        QVERIFY(replay.replaying());
        replay.refreshNow();
        QCOMPARE(replay.data().latestStep, 8);
        replay.setReplayPosition(0.0);
        replay.refreshNow();
        QVERIFY(replay.data().latestStep < 8);
        QCOMPARE(replay.compareRun(dir), QString());
        QCOMPARE(replay.comparisonTable()->columnCount(), 5); // a column for the second run
        QVERIFY(replay.openRun(runs_.path() + "/no-such-run").contains("not a directory"));
    }
};

} // namespace shardscope

QTEST_MAIN(shardscope::TestMonitorPage)
#include "test_monitor_page.moc"
