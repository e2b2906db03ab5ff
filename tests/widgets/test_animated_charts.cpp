// AnimatedBarChart and ShareChart: drawn at their final state whenever they are drawn for a file
// or a headless render (never an animation's first frame), in the order given, with labels that
// do not overlap.
#include "animated_charts.h"

#include <QImage>
#include <QPainter>
#include <QtTest>

using namespace shardscope;

namespace {

QImage render(Chart& chart, QSize size = {600, 400}) {
    QImage image(size, QImage::Format_ARGB32);
    image.fill(Qt::white);
    QPainter painter(&image);
    chart.renderTo(painter, size);
    return image;
}

// Pixels of exactly `color` in the rows [top, bottom).
int count(const QImage& image, const QColor& color, int top = 0, int bottom = -1) {
    if (bottom < 0)
        bottom = image.height();
    int n = 0;
    for (int y = top; y < bottom; ++y)
        for (int x = 0; x < image.width(); ++x)
            n += image.pixelColor(x, y) == color;
    return n;
}

bool overlapping(const std::vector<QRectF>& rects) {
    for (std::size_t i = 0; i < rects.size(); ++i)
        for (std::size_t j = i + 1; j < rects.size(); ++j)
            if (rects[i].intersects(rects[j]))
                return true;
    return false;
}

const QColor kRed(200, 30, 30), kBlue(30, 60, 200);

} // namespace

class TestAnimatedCharts : public QObject {
    Q_OBJECT
private slots:
    void barsAreDrawnAtTheirFinalHeights() {
        AnimatedBarChart chart(AnimatedBarChart::Direction::Up, true);
        chart.resize(600, 400);
        chart.setData({"GPU 0", "GPU 1"},
                      {{"weights", kRed, Qt::SolidPattern, {1e9, 1e9}, "", {}},
                       {"gradients", kBlue, Qt::SolidPattern, {0, 2e9}, "", {}}},
                      "per GPU");
        QCOMPARE(chart.unit(), QString("GB"));
        // Straight after setData, as an export or a headless render would draw it.
        const QImage first = render(chart);
        const int red = count(first, kRed), blue = count(first, kBlue);
        QVERIFY2(red > 1000, qPrintable(QString::number(red)));
        QVERIFY(blue > 1000);
        // The blue bar (2 GB on one GPU) covers about as much as the red (1 GB on each of two).
        QVERIFY(blue > 0.8 * red && blue < 1.25 * red);
        // New values on the same bars: the picture follows at once, and value() says so.
        chart.setData({"GPU 0", "GPU 1"},
                      {{"weights", kRed, Qt::SolidPattern, {2e9, 2e9}, "", {}},
                       {"gradients", kBlue, Qt::SolidPattern, {0, 2e9}, "", {}}},
                      "per GPU");
        QCOMPARE(chart.value(0, 1), 2e9);
        const int redAfter = count(render(chart), kRed);
        QVERIFY2(redAfter > 1.6 * red, qPrintable(QString("%1 %2").arg(red).arg(redAfter)));
        QVERIFY(!chart.labelRects().empty());
        QVERIFY(!overlapping(chart.labelRects()));
    }

    void aListOfBarsReadsTopToBottom() {
        AnimatedBarChart chart(AnimatedBarChart::Direction::Right, false);
        chart.resize(600, 400);
        chart.setData({"first", "second", "third"},
                      {{"sent", kRed, Qt::SolidPattern, {5e6, 0, 0}, "", {}}}, "sent");
        QCOMPARE(chart.unit(), QString("MB"));
        const QImage image = render(chart);
        // The only bar, the first category's, is in the top part of the picture (below it the
        // legend's swatch alone has the colour).
        const int top = count(image, kRed, 0, 150), rest = count(image, kRed, 150, 400);
        QVERIFY2(top > 10 * rest, qPrintable(QString("%1 %2").arg(top).arg(rest)));
        QCOMPARE(chart.category(0), QString("first"));
        QVERIFY(!overlapping(chart.labelRects()));
    }

    void sharesTurnWithTheirValues() {
        ShareChart chart;
        chart.resize(500, 360);
        chart.setSegments({{"Weights", 1e9, ""}, {"Activations", 3e9, ""}});
        QCOMPARE(chart.shareOf("Activations"), 0.75);
        QCOMPARE(chart.segmentCount(), 2);
        const QImage image = render(chart, {500, 360});
        // Categories' colours 0 and 1: the larger slice covers about three times the smaller.
        const int small = count(image, QColor(0x00, 0x72, 0xB2));
        const int large = count(image, QColor(0xE6, 0x9F, 0x00));
        QVERIFY2(large > 2.5 * small && large < 3.5 * small,
                 qPrintable(QString("%1 %2").arg(small).arg(large)));
        chart.setSegments({{"Weights", 3e9, ""}, {"Activations", 1e9, ""}});
        QCOMPARE(chart.shareOf("Weights"), 0.75);
    }
};

QTEST_MAIN(TestAnimatedCharts)
#include "test_animated_charts.moc"
