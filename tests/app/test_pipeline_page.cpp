// The Pipeline page: controls drive the simulated timelines, the closed form sits beside the
// simulation, the animation is deterministic, and the trace and CSV exports are complete.
#include "app_test_support.h"
#include "calculator_panel.h"
#include "pages/pipeline_page.h"
#include "pipeline_view.h"
#include "series_chart.h"
#include "session_document.h"

#include <QFile>
#include <QTemporaryDir>
#include <nlohmann/json.hpp>

using namespace shardscope;
using namespace shardscope::test;

namespace {
struct Fixture {
    SessionDocument doc;
    PipelinePage page{&doc};
    Fixture() { page.show(); }
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
