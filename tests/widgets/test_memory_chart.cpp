// MemoryChart: stacked bars per category against a capacity line, and hover tooltips.
#include "core/units.h"
#include "memory_chart.h"

#include <QImage>
#include <QPainter>
#include <QtTest>
#include <qcustomplot.h>

using namespace shardscope;

namespace {

MemoryBreakdown breakdown(double params, double grads, double opt, double act, double tmp,
                          double over) {
    MemoryBreakdown m;
    m.parameters = params * 1e9;
    m.gradients = grads * 1e9;
    m.optimizer = opt * 1e9;
    m.activations = act * 1e9;
    m.temporary = tmp * 1e9;
    m.overhead = over * 1e9;
    return m;
}

QList<QCPBars*> categoryBars(const MemoryChart& chart) {
    QList<QCPBars*> bars;
    for (int i = 0; i < chart.plot()->plottableCount(); ++i)
        if (auto* b = qobject_cast<QCPBars*>(chart.plot()->plottable(i)))
            bars << b;
    return bars;
}

// The widget-coordinate point of (bar key, value in GB).
QPoint pointAt(const MemoryChart& chart, double key, double gb) {
    const QCustomPlot* plot = chart.plot();
    const QPoint inPlot(qRound(plot->xAxis->coordToPixel(key)),
                        qRound(plot->yAxis->coordToPixel(gb)));
    return plot->mapTo(&chart, inPlot);
}

} // namespace

class TestMemoryChart : public QObject {
    Q_OBJECT

private slots:
    void init() {
        chart_ = std::make_unique<MemoryChart>();
        chart_->resize(800, 500);
        chart_->setBars({{QStringLiteral("stage 0"), breakdown(10, 5, 20, 30, 3, 2)},
                         {QStringLiteral("stage 1"), breakdown(8, 4, 16, 20, 3, 2)}},
                        80e9, QStringLiteral("H100 SXM5 80 GB"));
        chart_->setCategoryTooltips({QString(), QString(), QString(),
                                     QStringLiteral("s*b*h*(34+5as/h) [Korthikanti 2022]"),
                                     QString(), QString()});
        chart_->show();
        QVERIFY(QTest::qWaitForWindowExposed(chart_.get()));
        chart_->plot()->replot();
    }
    void cleanup() { chart_.reset(); }

    void storesBarsAndCapacity() {
        QCOMPARE(chart_->bars().size(), std::size_t(2));
        QCOMPARE(chart_->bars()[1].label, QStringLiteral("stage 1"));
        QCOMPARE(chart_->capacity(), 80e9);
        QCOMPARE(MemoryChart::categoryNames().size(), std::size_t(6));
        const auto bytes = MemoryChart::categoryBytes(chart_->bars()[0].memory);
        QCOMPARE(bytes[3], 30e9); // activations
    }

    void oneStackedBarsPerCategory() {
        const QList<QCPBars*> bars = categoryBars(*chart_);
        QCOMPARE(bars.size(), MemoryChart::kCategories);
        for (int c = 1; c < bars.size(); ++c)
            QCOMPARE(bars[c]->barBelow(), bars[c - 1]);
        // Walking down the stack from the top sums to the total, in GB.
        for (int bar = 0; bar < 2; ++bar) {
            double top = 0;
            for (QCPBars* b = bars.last(); b != nullptr; b = b->barBelow())
                top += b->data()->at(bar)->value;
            QVERIFY(qFuzzyCompare(top, chart_->bars()[std::size_t(bar)].memory.total() / 1e9));
        }
        QCOMPARE(bars[0]->data()->at(0)->value, 10.0); // weights of stage 0 in GB
    }

    void axesAndCapacityLine() {
        QCOMPARE(chart_->plot()->yAxis->label(), QStringLiteral("GB per GPU"));
        // Total 70 GB < capacity 80 GB: the range covers the line and its label above it,
        // inside the plot at the chart's smallest size.
        QVERIFY(chart_->plot()->yAxis->range().upper > 80.0);
        QImage image(chart_->minimumSize(), QImage::Format_ARGB32);
        QPainter painter(&image);
        chart_->renderTo(painter, image.size());
        painter.end();
        for (int i = 0; i < chart_->plot()->itemCount(); ++i) {
            if (auto* t = qobject_cast<QCPItemText*>(chart_->plot()->item(i))) {
                const double top =
                    t->position->pixelPosition().y() - QFontMetrics(t->font()).height();
                QVERIFY2(top >= chart_->plot()->axisRect()->top(), qPrintable(t->text()));
            }
        }
        QStringList texts;
        int lines = 0;
        for (int i = 0; i < chart_->plot()->itemCount(); ++i) {
            if (auto* t = qobject_cast<QCPItemText*>(chart_->plot()->item(i)))
                texts << t->text();
            if (auto* l = qobject_cast<QCPItemStraightLine*>(chart_->plot()->item(i))) {
                ++lines;
                QCOMPARE(l->pen().style(), Qt::DashLine);
                QCOMPARE(l->point1->coords().y(), 80.0);
            }
        }
        QCOMPARE(lines, 1);
        QCOMPARE(texts, QStringList{QStringLiteral("H100 SXM5 80 GB: 80 GB")});

        chart_->setBars(chart_->bars(), 0, QString()); // no capacity: no line
        QCOMPARE(chart_->plot()->itemCount(), 0);
        QVERIFY(qFuzzyCompare(chart_->plot()->yAxis->range().upper, 70 * 1.1));
    }

    void tooltipNamesBarCategoryAndValue() {
        // Stage 0 activations span 35..65 GB; hover at 50 GB.
        const QString tip = chart_->tooltipAt(pointAt(*chart_, 1, 50));
        QVERIFY2(tip.contains(QStringLiteral("stage 0")), qPrintable(tip));
        QVERIFY(tip.contains(QStringLiteral("Activations")));
        QVERIFY(tip.contains(QString::fromStdString(formatBytes(30e9))));
        QVERIFY(tip.contains(QStringLiteral("Korthikanti")));

        // Stage 1 weights at 4 GB.
        const QString weights = chart_->tooltipAt(pointAt(*chart_, 2, 4));
        QVERIFY2(weights.contains(QStringLiteral("stage 1")), qPrintable(weights));
        QVERIFY(weights.contains(QStringLiteral("Weights")));
        QVERIFY(weights.contains(QString::fromStdString(formatBytes(8e9))));
    }

    void smallBarsAreInMegabytesWithTheirPredictionMarked() {
        // A CPU run's ranks: 20 and 24 MB measured against 18 and 24 MB predicted.
        MemoryBreakdown a, b;
        a.parameters = 4e6;
        a.activations = 16e6;
        b.parameters = 4e6;
        b.activations = 20e6;
        a.temporary = 5e6; // not in the prediction
        const std::array<bool, 6> covers{true, true, true, true, false, false};
        chart_->setBars({{"rank 0", a, 18e6, covers}, {"rank 1", b, 24e6, covers}}, 0, {});
        QCOMPARE(chart_->plot()->yAxis->label(), QStringLiteral("MB per GPU"));
        QList<double> marked;
        for (int i = 0; i < chart_->plot()->itemCount(); ++i)
            if (auto* line = qobject_cast<QCPItemLine*>(chart_->plot()->item(i))) {
                QCOMPARE(line->start->coords().y(), line->end->coords().y());
                marked << line->start->coords().y();
            }
        QCOMPARE(marked, (QList<double>{18.0, 24.0}));
        chart_->plot()->replot();
        const QString tip = chart_->tooltipAt(pointAt(*chart_, 1, 10));
        QVERIFY2(tip.contains("predicted 18.0 MB"), qPrintable(tip));
        QVERIFY2(tip.contains("11.1 % from it"), qPrintable(tip)); // 20 / 18 - 1
        QVERIFY2(!tip.contains("temporary"), qPrintable(tip));
    }

    void tooltipIsEmptyOffTheBars() {
        QCOMPARE(chart_->tooltipAt(pointAt(*chart_, 1, 75)), QString());   // above stage 0 (70 GB)
        QCOMPARE(chart_->tooltipAt(pointAt(*chart_, 1.5, 10)), QString()); // between bars
        QCOMPARE(chart_->tooltipAt(QPoint(2, 2)), QString());
    }

    void followsThePalette() {
        QPalette dark = chart_->palette();
        dark.setColor(QPalette::Base, QColor(20, 20, 24));
        dark.setColor(QPalette::Text, QColor(235, 235, 235));
        chart_->setPalette(dark);
        QCOMPARE(chart_->plot()->xAxis->tickLabelColor(), QColor(235, 235, 235));
        QCOMPARE(chart_->plot()->legend->textColor(), QColor(235, 235, 235));
        const QImage image = chart_->plot()->toPixmap(400, 300).toImage();
        QCOMPARE(image.pixelColor(1, 1), QColor(20, 20, 24));
    }

private:
    std::unique_ptr<MemoryChart> chart_;
};

QTEST_MAIN(TestMemoryChart)
#include "test_memory_chart.moc"
