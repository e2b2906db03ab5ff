// SeriesChart: one graph per series in raw units, tick labels per ValueKind, log axes, threshold.
#include "series_chart.h"

#include <QtTest>
#include <cmath>
#include <qcustomplot.h>

using namespace shardscope;

namespace {

std::vector<Series> zeroSweep() {
    std::vector<Series> all;
    for (int z = 0; z < 3; ++z) {
        Series s;
        s.name = QStringLiteral("ZeRO-%1").arg(z);
        for (int n = 8; n <= 1024; n *= 2) {
            s.x.push_back(n);
            s.y.push_back((20.0 + 20.0 * z) * 1e9 / (z == 2 ? n / 8.0 : 1.0));
        }
        all.push_back(s);
    }
    return all;
}

QStringList labels(QCPAxis* axis) {
    QStringList out;
    for (const QString& s : axis->tickVectorLabels())
        out << s;
    return out;
}

} // namespace

class TestSeriesChart : public QObject {
    Q_OBJECT

private slots:
    void init() {
        chart_ = std::make_unique<SeriesChart>();
        chart_->resize(800, 500);
        chart_->setAxes(QStringLiteral("GPUs"), ValueKind::Plain, true,
                        QStringLiteral("memory per GPU"), ValueKind::Bytes, false);
        chart_->setSeries(zeroSweep());
        chart_->plot()->replot();
    }
    void cleanup() { chart_.reset(); }

    void oneGraphPerSeriesWithDistinctColours() {
        QCustomPlot* plot = chart_->plot();
        QCOMPARE(plot->graphCount(), 3);
        QCOMPARE(plot->legend->itemCount(), 3);
        QSet<QRgb> colours;
        for (int i = 0; i < 3; ++i) {
            QCOMPARE(plot->graph(i)->name(), QStringLiteral("ZeRO-%1").arg(i));
            colours.insert(plot->graph(i)->pen().color().rgb());
        }
        QCOMPARE(colours.size(), 3);
        // Data stays in raw units (bytes), not scaled.
        QCOMPARE(plot->graph(1)->data()->at(0)->value, 40e9);
        QCOMPARE(plot->graph(1)->data()->size(), 8);
    }

    void byteTicksReadAsBytes() {
        const QStringList l = labels(chart_->plot()->yAxis);
        QVERIFY(!l.isEmpty());
        for (const QString& s : l)
            QVERIFY2(s.endsWith(QStringLiteral(" GB")) || s == QStringLiteral("0 B"),
                     qPrintable(s));
        QVERIFY2(l.contains(QStringLiteral("20 GB")) || l.contains(QStringLiteral("40 GB")),
                 qPrintable(l.join(QLatin1Char('|'))));
        // Range covers the data: 0 .. 60 GB and a little more.
        QVERIFY(chart_->plot()->yAxis->range().lower <= 0);
        QVERIFY(chart_->plot()->yAxis->range().upper >= 60e9);
    }

    void logAxisUsesLogTicker() {
        QCPAxis* x = chart_->plot()->xAxis;
        QCOMPARE(x->scaleType(), QCPAxis::stLogarithmic);
        QVERIFY(!x->ticker().dynamicCast<QCPAxisTickerLog>().isNull());
        QCOMPARE(chart_->plot()->yAxis->scaleType(), QCPAxis::stLinear);
        QVERIFY(x->range().lower > 0 && x->range().lower <= 8);
        QVERIFY(x->range().upper >= 1024);
        QVERIFY(labels(x).contains(QStringLiteral("100")));

        chart_->setAxes(QStringLiteral("step"), ValueKind::Seconds, false, QStringLiteral("time"),
                        ValueKind::Seconds, true);
        chart_->plot()->replot();
        QCOMPARE(chart_->plot()->yAxis->scaleType(), QCPAxis::stLogarithmic);
        QCOMPARE(chart_->plot()->xAxis->scaleType(), QCPAxis::stLinear);
    }

    void thresholdIsADashedLineWithItsLabel() {
        chart_->setThreshold(80e9, QStringLiteral("H100 80 GB"));
        QCustomPlot* plot = chart_->plot();
        QCOMPARE(plot->itemCount(), 2);
        bool line = false, text = false;
        for (int i = 0; i < plot->itemCount(); ++i) {
            if (auto* l = qobject_cast<QCPItemStraightLine*>(plot->item(i))) {
                line = l->pen().style() == Qt::DashLine && l->point1->coords().y() == 80e9 &&
                       l->point2->coords().y() == 80e9;
            }
            if (auto* t = qobject_cast<QCPItemText*>(plot->item(i)))
                text = t->text() == QStringLiteral("H100 80 GB");
        }
        QVERIFY(line);
        QVERIFY(text);
        QVERIFY(plot->yAxis->range().upper >= 80e9);

        chart_->setThreshold(0, QString());
        QCOMPARE(plot->itemCount(), 0);
    }

    void nanLeavesAGap() {
        std::vector<Series> s = zeroSweep();
        s[0].y[2] = std::nan("");
        chart_->setSeries(s);
        QCOMPARE(chart_->series().size(), std::size_t(3));
        QCOMPARE(chart_->plot()->graph(0)->data()->size(), 8);
        QVERIFY(std::isnan(chart_->plot()->graph(0)->data()->at(2)->value));
        QCOMPARE(chart_->plot()->yAxis->range().lower, 0.0);
    }

private:
    std::unique_ptr<SeriesChart> chart_;
};

QTEST_MAIN(TestSeriesChart)
#include "test_series_chart.moc"
