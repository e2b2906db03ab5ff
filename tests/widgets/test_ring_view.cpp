// RingView: chunk fills follow the collective step by step, and it draws at any time.
#include "ring_view.h"

#include <QImage>
#include <QPainter>
#include <QSet>
#include <QtTest>

using namespace shardscope;

class TestRingView : public QObject {
    Q_OBJECT
private slots:
    void fillsFollowTheSteps() {
        RingView view;
        view.setPlan(buildCollective({CollectiveKind::RingAllReduce, 4, 4}), "ring");
        QCOMPARE(view.stepCount(), 6);
        view.setTime(0);
        QCOMPARE(view.fillOf(0, 0), 0.25); // its own contribution only
        QCOMPARE(view.phase(), QString("reduce-scatter"));
        view.setTime(3); // reduce-scatter done: rank i holds the whole sum of chunk i
        for (int r = 0; r < 4; ++r)
            QCOMPARE(view.fillOf(r, r), 1.0);
        QCOMPARE(view.phase(), QString("all-gather"));
        view.setTime(2.5);
        QCOMPARE(view.currentStep(), 2);
        view.setTime(100);
        QCOMPARE(view.currentStep(), 6);
        QCOMPARE(view.phase(), QString("done"));
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c)
                QCOMPARE(view.fillOf(r, c), 1.0);
    }

    void drawsEveryAlgorithm() {
        RingView view;
        view.resize(500, 500);
        QImage image(view.size(), QImage::Format_ARGB32);
        for (CollectiveKind kind :
             {CollectiveKind::RingAllReduce, CollectiveKind::NaiveAllReduce,
              CollectiveKind::TwoLevelAllReduce, CollectiveKind::RingAllGather}) {
            view.setPlan(buildCollective({kind, 16, 4}), "x");
            for (double t : {0.0, 0.5, 3.25, 1e9}) {
                view.setTime(t);
                image.fill(Qt::transparent);
                QPainter painter(&image);
                view.renderTo(painter, image.size());
                painter.end();
                // 16 ranks and their chunks: painted, in several colours.
                QSet<QRgb> colours;
                for (int y = 0; y < image.height(); y += 5)
                    for (int x = 0; x < image.width(); x += 5)
                        colours.insert(image.pixel(x, y));
                QVERIFY2(colours.size() >= 3, qPrintable(QString::number(t)));
            }
        }
        QVERIFY(view.chunkColor(0) != view.chunkColor(1));
    }
};

QTEST_MAIN(TestRingView)
#include "test_ring_view.moc"
