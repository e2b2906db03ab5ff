// The Collectives page: the chosen algorithm beside the naive one on one clock, figures from the
// alpha-beta model, step controls, and clear errors for shapes an algorithm cannot take.
#include "app_test_support.h"
#include "calculator_panel.h"
#include "pages/collectives_page.h"
#include "ring_view.h"
#include "session_document.h"

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
    void ringBesideNaive() {
        Fixture f;
        // 8 GPUs in one node, 1 GB at 450 GB/s: the ring takes 14 steps, the naive 2.
        QCOMPARE(f.page.mainView()->stepCount(), 14);
        QCOMPARE(f.page.compareView()->stepCount(), 2);
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

    void oneClockForBothAlgorithms() {
        Fixture f;
        f.page.setFraction(0);
        QCOMPARE(f.page.mainView()->currentStep(), 0);
        QVERIFY(f.page.stepText().startsWith("reduce-scatter, step 1 of 14"));
        // When the ring is done, the naive algorithm is still in its first step.
        f.page.setFraction(f.page.mainTiming().seconds / f.page.compareTiming().seconds + 1e-9);
        QCOMPARE(f.page.mainView()->currentStep(), 14);
        QCOMPARE(f.page.compareView()->currentStep(), 0);
        f.page.setFraction(1);
        QCOMPARE(f.page.compareView()->currentStep(), 2);
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
