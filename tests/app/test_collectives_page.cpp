// The Collectives page: the chosen algorithm beside the naive one, each a step per half second,
// narrated step by step, figures from the alpha-beta model, step controls, and clear errors for
// shapes an algorithm cannot take.
#include "app_test_support.h"
#include "calculator_panel.h"
#include "lesson_note.h"
#include "pages/collectives_page.h"
#include "ring_view.h"
#include "session_document.h"

#include <QLabel>
#include <QSettings>
#include <QStandardPaths>

using namespace shardscope;
using namespace shardscope::test;

namespace {
struct Fixture {
    SessionDocument doc;
    CollectivesPage page{&doc};
    Fixture() { page.show(); }
    SessionForm* form() { return page.form(); }
};
} // namespace

class TestCollectivesPage : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true); // the lesson's hidden state: not the user's
        QCoreApplication::setOrganizationName("ShardscopeTest");
        QCoreApplication::setApplicationName("test_collectives_page");
        QSettings().remove("lessons");
    }

    void ringBesideNaive() {
        Fixture f;
        // 8 GPUs in one node, 1 GB at 450 GB/s: the ring takes 14 steps; the naive one too, 7
        // buffers into GPU 0 and 7 sums out, one at a time over its one link.
        QCOMPARE(f.page.mainView()->stepCount(), 14);
        QCOMPARE(f.page.compareView()->stepCount(), 14);
        const double ring = f.page.mainTiming().seconds, naive = f.page.compareTiming().seconds;
        QVERIFY(naive > 7 * ring); // about n times, less the ring's extra latencies
        QVERIFY(f.page.panel()->verdictText().contains("Naive all-reduce takes"));
        QCOMPARE(figure(f.page.figures(), "Ring all-reduce", 1), 14.0);
        // On a ring every link carries 2(n-1)/n x S; through the naive root, (n-1) x S in.
        QCOMPARE(figure(f.page.figures(), "Ring all-reduce", 6), 2.0 * 7 / 8 * 1e9);
        QCOMPARE(figure(f.page.figures(), "Naive all-reduce", 6), 1e9);
        QVERIFY(tooltip(f.page.figures(), "Ring all-reduce", 4).contains("nccl-tests"));
        // busbw of the ring approaches the link bandwidth.
        QVERIFY(figure(f.page.figures(), "Ring all-reduce", 4) > 0.9 * 450e9);
        QVERIFY(f.page.panel()->formulaHtml().contains("nccl-tests"));
    }

    // Each algorithm takes a step every half second at 1x, however slow its steps are on the
    // links; the modelled time so far is in each view's caption.
    void eachAlgorithmStepsAtItsOwnPace() {
        Fixture f;
        QCOMPARE(f.page.clock().playSeconds(), 14 * CollectivesPage::kSecondsPerStep);
        setInt(f.form(), "ranks", 16);
        setInt(f.form(), "gpus-per-node", 4);
        choose(f.form(), "algorithm", "two-level-allreduce");
        // Two levels over 4 nodes of 4: 2 x 3 steps in nodes and 2 x 3 across; naive: 2 x 15.
        QCOMPARE(f.page.mainView()->stepCount(), 12);
        QCOMPARE(f.page.compareView()->stepCount(), 30);
        QCOMPARE(f.page.clock().playSeconds(), 30 * CollectivesPage::kSecondsPerStep);
        f.page.setFraction(0);
        QCOMPARE(f.page.mainView()->currentStep(), 0);
        QCOMPARE(f.page.compareView()->currentStep(), 0);
        f.page.setFraction(12.0 / 30);
        QCOMPARE(f.page.mainView()->currentStep(), 12); // done
        QCOMPARE(f.page.compareView()->currentStep(), 12);
        // The naive algorithm took as many steps but far longer on the links, and says so.
        QVERIFY(f.page.compareTiming().seconds > 2 * f.page.mainTiming().seconds);
        f.page.setFraction(1);
        QCOMPARE(f.page.compareView()->currentStep(), 30);
    }

    void narratesEachStep() {
        Fixture f;
        f.page.setFraction(0);
        QVERIFY2(f.page.stepText().startsWith("Step 1 of 14, reduce-scatter: 8 GPUs"),
                 qPrintable(f.page.stepText()));
        QCOMPARE(f.page.narration()->text(), f.page.stepText());
        f.page.stepForward();
        f.page.stepForward();
        // Step 3: GPU 1 adds chunk (0 - 2 - 1) mod 8 = 5 from GPU 0, which now sums 4 GPUs.
        QVERIFY2(f.page.narration()->text().contains("GPU 1 adds chunk 5 from GPU 0"),
                 qPrintable(f.page.narration()->text()));
        f.page.setFraction(1);
        QCOMPARE(f.page.narration()->text(),
                 QString("Done in 14 steps: every GPU holds the whole sum."));
        // The lesson beside the figure says what to try, and can be put away.
        QVERIFY(f.page.panel()->lesson()->html().contains("Try:"));
        QVERIFY(f.page.panel()->lesson()->isVisibleTo(&f.page));
    }

    void stepControlsWalkTheMainAlgorithm() {
        Fixture f;
        f.page.setFraction(0);
        f.page.stepForward();
        QCOMPARE(f.page.mainView()->currentStep(), 1);
        f.page.stepForward();
        QCOMPARE(f.page.mainView()->currentStep(), 2);
        f.page.stepBack();
        QCOMPARE(f.page.mainView()->currentStep(), 1);
        f.page.play();
        QVERIFY(f.page.playing());
        f.page.setFraction(1);
        QVERIFY(!f.page.playing());
        QVERIFY(f.page.showView("step-5")); // what --render collectives/step-5 shows
        QCOMPARE(f.page.mainView()->currentStep(), 5);
        QVERIFY(!f.page.showView("step-x"));
    }

    void controlsMoveTheFigures() {
        Fixture f;
        const double t = f.page.mainTiming().seconds;
        setDouble(f.form(), "size", 2);
        QVERIFY(f.page.mainTiming().seconds > 1.9 * t);
        setInt(f.form(), "ranks", 16);
        QCOMPARE(f.page.mainView()->stepCount(), 30);
        setInt(f.form(), "gpus-per-node", 4); // the ring now crosses nodes
        QVERIFY(f.page.mainTiming().seconds > 2 * t);
        choose(f.form(), "algorithm", "two-level-allreduce");
        QVERIFY(f.page.mainTiming().seconds < f.page.compareTiming().seconds);
        setInt(f.form(), "gpus-per-node", 5); // 16 GPUs are not whole nodes of 5
        QVERIFY(f.page.panel()->verdictLevel() == VerdictLevel::Bad);
        QVERIFY(f.page.panel()->verdictText().contains("whole nodes"));
        f.doc.undoStack()->undo();
        QVERIFY(f.page.panel()->verdictLevel() == VerdictLevel::Good);
    }
};

QTEST_MAIN(TestCollectivesPage)
#include "test_collectives_page.moc"
