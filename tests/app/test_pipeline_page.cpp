// The Pipeline page: controls drive the simulated timelines, the closed form sits beside the
// simulation, the animation is deterministic, and the trace and CSV exports are complete.
#include "app_test_support.h"
#include "calculator_panel.h"
#include "pages/pipeline_page.h"
#include "pipeline_view.h"
#include "series_chart.h"
#include "session_document.h"

#include <QFile>
#include <QLabel>
#include <QPushButton>
#include <QTemporaryDir>
#include <nlohmann/json.hpp>

using namespace shardscope;
using namespace shardscope::test;

namespace {
// The default session's layout (dp 2, pp 4, 1F1B) with a global batch of 16: m = 8.
Session teachingSession() {
    Session s = defaultSession();
    s.parallel.globalBatch = 16;
    return s;
}

struct Fixture {
    SessionDocument doc;
    PipelinePage page{&doc};
    explicit Fixture(const Session& s = teachingSession()) {
        doc.reset(s);
        page.show();
    }
    SessionForm* form() { return page.form(); }
};
} // namespace

class TestPipelinePage : public QObject {
    Q_OBJECT
private slots:
    void defaultCompares1F1BWithZeroBubble() {
        Fixture f;
        QVERIFY(f.page.timelineA() && f.page.timelineB());
        QCOMPARE(f.page.timelineA()->makespan, 33.0); // (m + p - 1)(F + B + W)
        QCOMPARE(f.page.timelineB()->makespan, 27.0); // 3m + (p - 1)(F + B - W)
        QCOMPARE(figure(f.page.figures(), "1F1B", 2), 3.0 / 11);
        QCOMPARE(figure(f.page.figures(), "1F1B", 3), 3.0 / 11); // the closed form agrees
        const QString verdict = f.page.panel()->verdictText();
        QVERIFY2(verdict.contains("27.3 %") && verdict.contains("6 time units less"),
                 qPrintable(verdict));
        QCOMPARE(int(f.page.memoryChart()->series().size()), 2);
        QCOMPARE(f.page.memoryChart()->series()[0].y.front(), 4.0); // rank 0 holds p
    }

    // ZB-2p at p 4, m 8 (Qi et al. 2024): no rank idles between its first op and its last, but
    // the last rank starts p - 1 forwards late, so the makespan is ZB-H1's 3m + p - 1 = 27: a
    // bubble of 3/27 over the makespan (the closed form agrees) and none over a rank's span.
    void zeroBubble2pIdlesOnlyBeforeAndAfterEachRanksSpan() {
        Fixture f;
        choose(f.form(), "schedule", "zb-2p");
        QVERIFY(f.page.timelineA());
        QCOMPARE(f.page.timelineA()->makespan, 27.0);
        const QString name = "Zero bubble ZB-2p (automatic, twice the memory)";
        QCOMPARE(figure(f.page.figures(), name, 2), 3.0 / 27);
        QCOMPARE(figure(f.page.figures(), name, 3), 3.0 / 27);
        QCOMPARE(figure(f.page.figures(), name, 4) + 1.0, 1.0);
        QCOMPARE(f.page.timelineA()->longestRankSpan, 24.0);
    }

    void controlsDriveTheSimulation() {
        Fixture f;
        choose(f.form(), "compare", "none");
        QVERIFY(!f.page.timelineB());
        QVERIFY(f.page.viewB()->isHidden());
        setInt(f.form(), "pp", 8);
        QCOMPARE(figure(f.page.figures(), "1F1B", 2), 7.0 / 15);
        setInt(f.form(), "microbatches", 32);
        QCOMPARE(figure(f.page.figures(), "1F1B", 2), 7.0 / 39);
        choose(f.form(), "schedule", "interleaved");
        QVERIFY(f.page.timelineA());
        QVERIFY(figure(f.page.figures(), "Interleaved 1F1B", 2) < 7.0 / 39);
        setDouble(f.form(), "p2p", 0.5);
        QVERIFY(f.page.timelineA()->makespan > 3.0 * 32);
        f.doc.undoStack()->undo();
        QCOMPARE(f.doc.session().pipeline.p2p, 0.0);
    }

    void opensOnTheSessionsLayoutAndFollowsIt() {
        Session s = teachingSession();
        s.parallel.pp = 2;
        s.parallel.tp = 16;
        s.parallel.cp = 2;
        s.parallel.vpp = 2;
        s.parallel.schedule = PipelineSchedule::Interleaved;
        Fixture f(s);
        QVERIFY(f.page.timelineA());
        QCOMPARE(int(f.page.timelineA()->ranks.size()), 2);
        QCOMPARE(f.page.figures()->item(0, 0)->text(), QString("Interleaved 1F1B"));
        QCOMPARE(f.page.timelineA()->ranks[0].size(), std::size_t(2 * 8 * 2)); // F and B, m x v
        const QString note = f.page.layoutNote()->text();
        QVERIFY2(note.contains("session's layout") && note.contains("pp 2, m 8, v 2"),
                 qPrintable(note));
        // What a drawn rank stands for: its tensor- and context-parallel group.
        QVERIFY2(note.contains("tp 16 x cp 2 = 32 GPUs"), qPrintable(note));
        QVERIFY(f.page.backToLayoutButton()->isHidden());
        // The Explorer changes the layout: the page follows.
        f.doc.edit("pp 4", [](Session& x) {
            x.parallel.pp = 4;
            x.parallel.tp = 8;
        });
        QCOMPARE(int(f.page.timelineA()->ranks.size()), 4);
    }

    void settingALayoutFieldIsAnExperimentAndOneClickGoesBack() {
        Fixture f;
        setInt(f.form(), "pp", 8);
        QCOMPARE(int(f.page.timelineA()->ranks.size()), 8);
        QVERIFY(!f.doc.session().pipeline.followsLayout);
        QVERIFY(!f.page.backToLayoutButton()->isHidden());
        QVERIFY2(f.page.layoutNote()->text().startsWith("Experimenting"),
                 qPrintable(f.page.layoutNote()->text()));
        // The layout is untouched, and its changes no longer move the experiment.
        QCOMPARE(f.doc.session().parallel.pp, 4);
        f.doc.edit("gb", [](Session& x) { x.parallel.globalBatch = 32; });
        QCOMPARE(figure(f.page.figures(), "1F1B", 2), 7.0 / 15); // still p 8, m 8
        QTest::mouseClick(f.page.backToLayoutButton(), Qt::LeftButton);
        QVERIFY(f.doc.session().pipeline.followsLayout);
        QCOMPARE(int(f.page.timelineA()->ranks.size()), 4);
        QCOMPARE(figure(f.page.figures(), "1F1B", 2), 3.0 / 19); // p 4, m 16: the layout's
        QVERIFY(f.page.backToLayoutButton()->isHidden());
    }

    void aLayoutBeyondWhatThePageDrawsIsCutAndSaysSo() {
        Session s = teachingSession();
        s.parallel.globalBatch = 2 * 4096; // m 4096
        Fixture f(s);
        QCOMPARE(f.page.timelineA()->ranks[0].size(), std::size_t(2 * 1024));
        QVERIFY2(f.page.layoutNote()->text().contains("4096 microbatches are drawn as 1024"),
                 qPrintable(f.page.layoutNote()->text()));
    }

    void unsupportedShapesSayWhy() {
        Fixture f;
        choose(f.form(), "schedule", "interleaved");
        setInt(f.form(), "microbatches", 6);
        QVERIFY(!f.page.timelineA());
        QVERIFY(f.page.panel()->verdictLevel() == VerdictLevel::Bad);
        QVERIFY(f.page.panel()->verdictText().contains("divisible by p"));
        QVERIFY(f.page.timelineB()); // the comparison still runs
    }

    void animationIsTimeBased() {
        Fixture f;
        f.page.setAnimationTime(PipelinePage::kPlaySeconds / 2);
        QCOMPARE(f.page.viewA()->playhead(), 33.0 / 2);
        QCOMPARE(f.page.viewB()->playhead(), 33.0 / 2); // one clock for both
        f.page.play();
        QVERIFY(f.page.playing());
        f.page.pause();
        QVERIFY(!f.page.playing());
        f.page.play();
        f.page.setAnimationTime(PipelinePage::kPlaySeconds);
        QVERIFY(!f.page.playing()); // stops at the end
        QCOMPARE(f.page.viewA()->playhead(), 33.0);
        QVERIFY(f.page.showView("at-25")); // what --render pipeline/at-25 shows
        QCOMPARE(f.page.viewA()->playhead(), 33.0 / 4);
        QVERIFY(!f.page.showView("at-200"));
    }

    void exportsTraceAndCsv() {
        Fixture f;
        QTemporaryDir dir;
        const QString path = dir.filePath("trace.json");
        QCOMPARE(f.page.exportTrace(path), QString());
        QFile file(path);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const auto j = nlohmann::json::parse(file.readAll().toStdString());
        int ops = 0;
        for (const auto& e : j["traceEvents"])
            ops += e["ph"] == "X";
        QCOMPARE(ops, 2 * 4 * 8);
        const auto tables = f.page.tables();
        QCOMPARE(tables[1].second->rowCount(), 2 * 4 * 8);
        QVERIFY(f.page.exportTrace("/nonexistent/x.json").contains("cannot write"));
    }
};

QTEST_MAIN(TestPipelinePage)
#include "test_pipeline_page.moc"
