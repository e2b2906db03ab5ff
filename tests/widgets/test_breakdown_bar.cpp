// BreakdownBar: proportional segments, skipped non-positive parts, tooltips and the legend.
#include "breakdown_bar.h"
#include "core/units.h"

#include <QFile>
#include <QSet>
#include <QTemporaryDir>
#include <QtTest>

using namespace shardscope;

namespace {

std::vector<Segment> stepTime() {
    return {{QStringLiteral("Compute"), 6.0, QStringLiteral("6 N T / peak")},
            {QStringLiteral("DP exposed"), 2.0, QString()},
            {QStringLiteral("Bubble"), 0.0, QString()},
            {QStringLiteral("Broken"), -1.0, QString()},
            {QStringLiteral("Optimizer"), 2.0, QString()}};
}

QString labelOf(const QString& tooltip) {
    return tooltip.section(QLatin1Char(':'), 0, 0);
}

} // namespace

class TestBreakdownBar : public QObject {
    Q_OBJECT

private slots:
    void init() {
        bar_ = std::make_unique<BreakdownBar>();
        bar_->resize(616, 120); // an 600 px bar after the 8 px margins
        bar_->setSegments(stepTime(), ValueKind::Seconds);
    }
    void cleanup() { bar_.reset(); }

    void segmentsAreProportional() {
        QCOMPARE(bar_->segments().size(), std::size_t(5));
        const int y = 20; // inside the bar
        // Compute covers the first 60 %, DP the next 20 %, the optimizer the last 20 %.
        QCOMPARE(labelOf(bar_->tooltipAt(QPoint(8 + 10, y))), QStringLiteral("Compute"));
        QCOMPARE(labelOf(bar_->tooltipAt(QPoint(8 + 350, y))), QStringLiteral("Compute"));
        QCOMPARE(labelOf(bar_->tooltipAt(QPoint(8 + 370, y))), QStringLiteral("DP exposed"));
        QCOMPARE(labelOf(bar_->tooltipAt(QPoint(8 + 470, y))), QStringLiteral("DP exposed"));
        QCOMPARE(labelOf(bar_->tooltipAt(QPoint(8 + 490, y))), QStringLiteral("Optimizer"));
        QCOMPARE(labelOf(bar_->tooltipAt(QPoint(8 + 595, y))), QStringLiteral("Optimizer"));
    }

    void nonPositiveSegmentsAreSkipped() {
        QSet<QString> seen;
        for (int x = 0; x < bar_->width(); ++x) {
            const QString tip = bar_->tooltipAt(QPoint(x, 20));
            if (!tip.isEmpty())
                seen.insert(labelOf(tip));
        }
        QCOMPARE(seen, (QSet<QString>{QStringLiteral("Compute"), QStringLiteral("DP exposed"),
                                      QStringLiteral("Optimizer")}));
    }

    void tooltipHasValueShareAndFormula() {
        const QString tip = bar_->tooltipAt(QPoint(100, 20));
        QVERIFY2(tip.contains(QString::fromStdString(formatSeconds(6.0))), qPrintable(tip));
        QVERIFY(tip.contains(QString::fromStdString(formatPercent(0.6))));
        QVERIFY(tip.contains(QString::fromStdString(formatSeconds(10.0)))); // the total
        QVERIFY(tip.contains(QStringLiteral("6 N T / peak")));
        QCOMPARE(bar_->tooltipAt(QPoint(300, 2)), QString()); // margin above the bar
        QCOMPARE(bar_->tooltipAt(QPoint(2, 20)), QString());  // margin left of it
    }

    void legendShowsLabelValueAndShare() {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("bar.svg"));
        QCOMPARE(exportChart(*bar_, path, QSize(616, 120)), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QString svg = QString::fromUtf8(f.readAll());
        QVERIFY(svg.contains(QStringLiteral("Compute 6.00 s (60.0 %)")));
        QVERIFY(svg.contains(QStringLiteral("Optimizer 2.00 s (20.0 %)")));
        QVERIFY(!svg.contains(QStringLiteral("Broken")));
        QVERIFY(!svg.contains(QStringLiteral("nothing to show")));
        QVERIFY(bar_->heightForWidth(616) > 40);
        QVERIFY(bar_->heightForWidth(200) > bar_->heightForWidth(616)); // the legend wraps
    }

    void allZeroShowsNothingToShow() {
        bar_->setSegments({{QStringLiteral("a"), 0, {}}, {QStringLiteral("b"), 0, {}}},
                          ValueKind::Bytes);
        for (int x = 0; x < bar_->width(); x += 5)
            QCOMPARE(bar_->tooltipAt(QPoint(x, 20)), QString());
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("empty.svg"));
        QCOMPARE(exportChart(*bar_, path, QSize(400, 80)), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QVERIFY(f.readAll().contains("nothing to show"));

        bar_->setSegments({}, ValueKind::Plain);
        QCOMPARE(bar_->tooltipAt(QPoint(100, 20)), QString());
    }

private:
    std::unique_ptr<BreakdownBar> bar_;
};

QTEST_MAIN(TestBreakdownBar)
#include "test_breakdown_bar.moc"
