// PipelineView: the state at a given playhead time is what the timeline says, and it draws.
#include "pipeline_view.h"

#include <QImage>
#include <QPainter>
#include <QSet>
#include <QtTest>

using namespace shardscope;

namespace {
PipelineTimeline oneFOneB(int p, int m) {
    PipelineCosts costs;
    costs.perRank = {{1, 1, 1}};
    return simulate(buildPipelineProgram({PipelineSchedule::OneFOneB, p, m, 1}), costs);
}
} // namespace

class TestPipelineView : public QObject {
    Q_OBJECT
private slots:
    void stateAtAGivenTime() {
        PipelineView view;
        const PipelineTimeline t = oneFOneB(4, 8);
        view.setTimeline(t, 1, "1F1B");
        QCOMPARE(view.makespan(), 33.0);
        // Rank 0 runs F0 on [0, 1), then F1; rank 3 is idle until its first forward at 3.
        QCOMPARE(view.opAt(0, 0.5), 0);
        QCOMPARE(view.opAt(0, 1.5), 1);
        QCOMPARE(view.opAt(3, 2.5), -1);
        QCOMPARE(view.opAt(3, 3.5), 0);
        view.setPlayhead(1.5);
        QCOMPARE(view.progressOf(0, 0), 1.0);
        QCOMPARE(view.progressOf(0, 1), 0.5);
        QCOMPARE(view.progressOf(0, 2), 0.0);
        view.setPlayhead(1e9); // clamped to the end
        QCOMPARE(view.playhead(), 33.0);
    }

    void drawsFinishedOpsInTheirColour() {
        PipelineView view;
        view.resize(1000, 300);
        view.setTimeline(oneFOneB(4, 8), 1, "1F1B");
        view.setPlayhead(20);
        QImage image(view.size(), QImage::Format_ARGB32);
        QPainter painter(&image);
        view.renderTo(painter, image.size());
        painter.end();
        // The middle of rank 0's first forward: [0, 1) of 33 across the plot.
        const int x = 64 + int((1000 - 64 - 12) * 0.5 / 33.0);
        const int rowHeight = (300 - 24 - 22) / 4;
        const QColor pixel = image.pixelColor(x, 24 + rowHeight / 2);
        QCOMPARE(pixel, view.colorOf(OpKind::Forward));
        QVERIFY(!view.tooltipAt(QPoint(x, 24 + rowHeight / 2)).isEmpty());
    }

    void waitsAreDrawnAlongTheRowInsideTheTimeline() {
        PipelineView view;
        view.resize(1000, 300);
        view.setTimeline(oneFOneB(4, 8), 1, "measured");
        // Rank 3 waits [0, 3) for its first input; a wait past the end is clipped away.
        view.setWaits({{}, {}, {}, {{0.0, 3.0}, {33.0, 40.0}}});
        QImage image(view.size(), QImage::Format_ARGB32);
        image.fill(Qt::white);
        {
            QPainter painter(&image);
            view.renderTo(painter, image.size());
        }
        const double perSecond = (1000 - 64 - 12) / 33.0;
        const double rowHeight = (300 - 24 - 22) / 4.0;
        const int bottom = int(24 + 4 * rowHeight - 2 - 1.5); // inside the 3-pixel strip
        const QColor waiting(0xD5, 0x5E, 0x00);
        QCOMPARE(image.pixelColor(64 + int(1.5 * perSecond), bottom), waiting);
        QVERIFY(image.pixelColor(64 + int(5.5 * perSecond), bottom) != waiting);
        // Transfers along the top of the row.
        view.setTransfers({{{1.0, 2.0}}});
        {
            QPainter painter(&image);
            view.renderTo(painter, image.size());
        }
        const int top = int(24 + 2 + 1.5); // inside rank 0's top strip
        QCOMPARE(image.pixelColor(64 + int(1.5 * perSecond), top), QColor(0x56, 0x56, 0x56));
        // A new timeline forgets the old waits and transfers.
        view.setTimeline(oneFOneB(4, 8), 1, "again");
        {
            QPainter painter(&image);
            view.renderTo(painter, image.size());
        }
        QVERIFY(image.pixelColor(64 + int(1.5 * perSecond), bottom) != waiting);
    }

    void largePipelinesRender() {
        PipelineView view;
        view.resize(1600, 900);
        view.setTimeline(oneFOneB(16, 64), 1, "1F1B p16 m64");
        for (double t : {0.0, 50.0, 100.0, 237.0}) {
            view.setPlayhead(t);
            QImage image(view.size(), QImage::Format_ARGB32);
            image.fill(Qt::transparent);
            QPainter painter(&image);
            view.renderTo(painter, image.size());
            painter.end();
            // 16 ranks of forward and backward ops: the view is painted, in several colours.
            QSet<QRgb> colours;
            for (int y = 0; y < image.height(); y += 7)
                for (int x = 0; x < image.width(); x += 7)
                    colours.insert(image.pixel(x, y));
            QVERIFY2(colours.size() >= 4, qPrintable(QString::number(t)));
        }
        view.clear("interleaved 1F1B needs m divisible by p");
        QCOMPARE(view.opAt(0, 1), -1);
    }
};

QTEST_MAIN(TestPipelineView)
#include "test_pipeline_view.moc"
