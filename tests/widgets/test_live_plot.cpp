// LivePlot: lines per rank or a median with its band, a dashed reference, and data replaced in
// place without remaking the graphs.
#include "live_plot.h"

#include <QtTest>
#include <qcustomplot.h>

using namespace shardscope;

namespace {
LiveLine line(const QString& name, double level, int n = 100) {
    LiveLine l{name, {}, {}, false};
    for (int i = 1; i <= n; ++i) {
        l.x << i;
        l.y << level + 0.01 * (i % 7);
    }
    return l;
}
} // namespace

class TestLivePlot : public QObject {
    Q_OBJECT
private slots:
    void linesBandAndReferenceBecomeGraphsAndItems() {
        LivePlot plot;
        plot.resize(600, 400);
        plot.setAxes("step", "tokens/s", ValueKind::Plain);
        plot.setData({line("median of 64 ranks", 5)}, LiveBand{{1, 2, 3}, {4, 4, 4}, {6, 6, 6}});
        QCOMPARE(plot.plot()->graphCount(), 3); // band low, band high, the median
        QVERIFY(plot.hasBand());
        plot.setReference(7.5, "predicted");
        int lines = 0;
        for (int i = 0; i < plot.plot()->itemCount(); ++i)
            if (auto* l = qobject_cast<QCPItemStraightLine*>(plot.plot()->item(i))) {
                ++lines;
                QCOMPARE(l->point1->coords().y(), 7.5);
            }
        QCOMPARE(lines, 1);
        // The axis takes the reference in, so the prediction is visible above the data.
        QVERIFY(plot.plot()->yAxis->range().upper > 7.5);
        plot.setReference(NAN, "predicted");
        QCOMPARE(plot.plot()->itemCount(), 0);
        QCOMPARE(plot.plot()->graphCount(), 3);
    }

    void newDataOfTheSameShapeKeepsTheGraphs() {
        LivePlot plot;
        plot.setData({line("rank 0", 1), line("rank 1", 2)});
        QCPGraph* first = plot.plot()->graph(0);
        plot.setData({line("rank 0", 1, 500), line("rank 1", 2, 500)});
        QCOMPARE(plot.plot()->graph(0), first);
        QCOMPARE(first->dataCount(), 500);
        QCOMPARE(plot.plot()->xAxis->range().upper, 500.0);
        plot.setData({line("rank 0", 1)}); // a rank fewer: remade
        QCOMPARE(plot.plot()->graphCount(), 1);
        QCOMPARE(plot.lineCount(), 1);
    }
};

QTEST_MAIN(TestLivePlot)
#include "test_live_plot.moc"
