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

    // GPU names sit in their boxes and arrows run between boxes (curved inwards past the boxes
    // between two that are not neighbours), so no arrow ever crosses a label, for every
    // algorithm, ring size and step, at the sizes the page gives the view.
    void labelsNeverLieUnderArrowsOrOnEachOther() {
        RingView view;
        QImage image(10, 10, QImage::Format_ARGB32);
        for (const QSize size : {QSize(460, 360), QSize(560, 620), QSize(900, 760)}) {
            image = QImage(size, QImage::Format_ARGB32);
            for (CollectiveKind kind :
                 {CollectiveKind::RingAllReduce, CollectiveKind::NaiveAllReduce,
                  CollectiveKind::TwoLevelAllReduce, CollectiveKind::RingAllGather}) {
                for (int n : {2, 3, 5, 8, 12, 16}) {
                    const CollectivePlan plan = buildCollective({kind, n, n % 4 == 0 ? 4 : n});
                    view.setPlan(plan, "caption");
                    view.setStatus("status");
                    for (int step = 0; step < view.stepCount(); ++step) {
                        view.setTime(step + 0.5);
                        QPainter painter(&image);
                        view.renderTo(painter, image.size());
                        painter.end();
                        const QString where = QString("%1 n=%2 step %3 at %4x%5")
                                                  .arg(QString::fromStdString(toString(kind)))
                                                  .arg(n)
                                                  .arg(step)
                                                  .arg(size.width())
                                                  .arg(size.height());
                        QVERIFY2(view.arrowPaths().size() ==
                                     plan.steps[std::size_t(step)].transfers.size(),
                                 qPrintable(where));
                        const auto& labels = view.labelRects();
                        QCOMPARE(int(labels.size()), n + 2); // caption, status, one per GPU
                        for (std::size_t i = 0; i < labels.size(); ++i) {
                            for (std::size_t j = i + 1; j < labels.size(); ++j)
                                QVERIFY2(!labels[i].intersects(labels[j]), qPrintable(where));
                            for (const QPolygonF& arrow : view.arrowPaths())
                                QVERIFY2(!crosses(arrow, labels[i]), qPrintable(where));
                        }
                    }
                }
            }
        }
    }

private:
    // Whether any point of the path lies in the rectangle (sampled every half pixel).
    static bool crosses(const QPolygonF& path, const QRectF& rect) {
        for (qsizetype k = 1; k < path.size(); ++k) {
            const QLineF line(path[k - 1], path[k]);
            const int samples = std::max(2, int(line.length() * 2));
            for (int i = 0; i <= samples; ++i) {
                if (rect.contains(line.pointAt(double(i) / samples)))
                    return true;
            }
        }
        return false;
    }
};

QTEST_MAIN(TestRingView)
#include "test_ring_view.moc"
