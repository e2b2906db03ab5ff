// ClusterMap: hit-testing against what is drawn, colours per group, warnings, and a 16k-GPU map.
#include "cluster_map.h"
#include "plan/layout.h"

#include <QElapsedTimer>
#include <QImage>
#include <QMouseEvent>
#include <QPainter>
#include <QSet>
#include <QSignalSpy>
#include <QtTest>
#include <map>

using namespace shardscope;

namespace {

ClusterSpec cluster(int nodes, int gpusPerNode = 8) {
    ClusterSpec c;
    c.nodes = nodes;
    c.gpusPerNode = gpusPerNode;
    return c;
}

ParallelConfig layout(int dp, int tp, int pp, int cp = 1) {
    ParallelConfig p;
    p.dp = dp;
    p.tp = tp;
    p.pp = pp;
    p.cp = cp;
    return p;
}

// For every GPU, one point where gpuAt finds it (scanning the widget every 2 px).
std::map<int, QPoint> hitPoints(const ClusterMap& map) {
    std::map<int, QPoint> points;
    for (int y = 0; y < map.height(); y += 2)
        for (int x = 0; x < map.width(); x += 2) {
            const int rank = map.gpuAt(QPoint(x, y));
            if (rank >= 0 && points.find(rank) == points.end())
                points[rank] = QPoint(x, y);
        }
    return points;
}

QImage render(ClusterMap& map) {
    QImage image(map.size(), QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::white);
    QPainter painter(&image);
    map.renderTo(painter, map.size());
    return image;
}

} // namespace

class TestClusterMap : public QObject {
    Q_OBJECT

private slots:
    void gpuAtAndDescribeGpuRoundTrip() {
        ClusterMap map;
        map.resize(800, 500);
        map.setLayout(cluster(2), layout(2, 8, 1));
        QCOMPARE(map.gpuCount(), 16);
        const auto points = hitPoints(map);
        QCOMPARE(int(points.size()), 16); // every GPU is drawn and can be hovered

        const QImage image = render(map);
        const QImage onScreen = map.grab().toImage(); // through paintEvent and its cache
        for (int rank : {0, 5, 8, 13, 15}) {
            const QPoint p = points.at(rank);
            QCOMPARE(map.gpuAt(p), rank);
            // What gpuAt says is there is what was painted there.
            QCOMPARE(image.pixelColor(p), map.colorOf(rank));
            QCOMPARE(onScreen.pixelColor(p), map.colorOf(rank));
            const RankCoordinate c = rankCoordinate(layout(2, 8, 1), rank, 8);
            QCOMPARE(map.describeGpu(rank),
                     QStringLiteral("GPU %1 (node %2, slot %3): dp %4, tp %5, pp %6, cp %7")
                         .arg(rank)
                         .arg(c.node)
                         .arg(rank % 8)
                         .arg(c.dp)
                         .arg(c.tp)
                         .arg(c.pp)
                         .arg(c.cp));
        }
        QCOMPARE(map.describeGpu(13),
                 QStringLiteral("GPU 13 (node 1, slot 5): dp 1, tp 5, pp 0, cp 0"));
        QCOMPARE(map.gpuAt(QPoint(1, 1)), -1);
        QCOMPARE(map.describeGpu(16), QString());
        QCOMPARE(map.describeGpu(-1), QString());
    }

    void tpGroupsShareAColourAndNeighboursDiffer() {
        ClusterMap map;
        map.setLayout(cluster(2), layout(4, 4, 1));
        map.setColorBy(ColorBy::TpGroup);
        QCOMPARE(map.colorBy(), ColorBy::TpGroup);
        for (int group = 0; group < 4; ++group) {
            for (int r = 1; r < 4; ++r)
                QCOMPARE(map.colorOf(group * 4 + r), map.colorOf(group * 4));
            if (group > 0)
                QVERIFY(map.colorOf(group * 4) != map.colorOf(group * 4 - 1));
        }
        // Many small groups: every neighbouring pair still differs.
        map.setLayout(cluster(4), layout(16, 2, 1));
        for (int g = 1; g < 16; ++g)
            QVERIFY(map.colorOf(2 * g) != map.colorOf(2 * g - 1));
    }

    // Up to 16 groups every group has its own colour, far enough from every other to tell
    // apart; past 16 the colours repeat under a hatching that differs.
    void sixteenGroupsStayDistinctThenHatched() {
        ClusterMap map;
        map.setLayout(cluster(4), layout(1, 1, 32)); // 32 pipeline stages, one GPU each
        map.setColorBy(ColorBy::PpStage);
        for (int a = 0; a < 16; ++a) {
            QCOMPARE(map.hatchOf(a), Qt::NoBrush);
            for (int b = a + 1; b < 16; ++b) {
                const QColor x = map.colorOf(a), y = map.colorOf(b);
                // Euclidean distance in RGB: more than a seventh of the grey axis (441).
                const double d =
                    std::hypot(x.red() - y.red(), x.green() - y.green(), x.blue() - y.blue());
                QVERIFY2(d > 60, qPrintable(QString("stages %1 and %2").arg(a).arg(b)));
            }
        }
        QCOMPARE(map.colorOf(16), map.colorOf(0));
        QVERIFY(map.hatchOf(16) != Qt::NoBrush);
        QCOMPARE(map.hatchOf(17), map.hatchOf(16));
        // Drawn: a hatched GPU's cell holds more than its one colour.
        map.resize(900, 500);
        const auto points = hitPoints(map);
        const QImage image = render(map);
        // A patch of the cell clear of its number, near its top left corner (hitPoints gives
        // the first pixel of each cell).
        const int pitch = points.at(1).x() - points.at(0).x();
        QVERIFY(pitch >= 12);
        const auto coloursAround = [&](int rank) {
            QSet<QRgb> seen;
            const QPoint c = points.at(rank) + QPoint(pitch / 5, pitch / 5);
            for (int dy = -2; dy <= 2; ++dy)
                for (int dx = -2; dx <= 2; ++dx)
                    seen.insert(image.pixel(c + QPoint(dx, dy)));
            return seen.size();
        };
        QCOMPARE(coloursAround(0), 1);
        QVERIFY(coloursAround(16) > 1);
    }

    void rampColouringFollowsTheAxis() {
        ClusterMap map;
        map.setLayout(cluster(2), layout(2, 2, 4)); // pp stage = rank / 4
        map.setColorBy(ColorBy::PpStage);
        QCOMPARE(map.colorOf(0), map.colorOf(3));
        map.resize(400, 300);
        const auto points = hitPoints(map);
        QCOMPARE(map.grab().toImage().pixelColor(points.at(4)), map.colorOf(4));
        QVERIFY(map.colorOf(3) != map.colorOf(4));
        QVERIFY(map.colorOf(4) != map.colorOf(8));
        map.setColorBy(ColorBy::DpReplica); // dp = (rank / 2) % 2
        QCOMPARE(map.colorOf(0), map.colorOf(4));
        // The cached picture follows the colouring.
        QCOMPARE(map.grab().toImage().pixelColor(points.at(2)), map.colorOf(2));
        QVERIFY(map.colorOf(0) != map.colorOf(2));
        QCOMPARE(toDisplayString(ColorBy::PpStage), QStringLiteral("PP stage"));
        QCOMPARE(toDisplayString(ColorBy::CpRank), QStringLiteral("CP rank"));
    }

    void warningExactlyWhenTpCrossesNodes() {
        struct Case {
            int nodes, dp, tp;
        };
        for (const Case& c : {Case{2, 16, 1}, Case{2, 8, 2}, Case{2, 2, 8}, Case{2, 1, 16},
                              Case{3, 8, 3}, Case{3, 4, 6}, Case{4, 1, 32}}) {
            ClusterMap map;
            const ParallelConfig p = layout(c.dp, c.tp, 1);
            map.setLayout(cluster(c.nodes), p);
            QCOMPARE(map.tpCrossesNodes(), tpCrossesNodes(p, 8));
            QCOMPARE(map.warning().isEmpty(), !map.tpCrossesNodes());
        }
        ClusterMap map;
        map.setLayout(cluster(2), layout(1, 16, 1));
        QVERIFY(map.tpCrossesNodes());
        QVERIFY2(map.warning().contains(QStringLiteral("TP group of 16 spans 2 nodes")),
                 qPrintable(map.warning()));
        map.setLayout(cluster(2), layout(2, 8, 1));
        QCOMPARE(map.warning(), QString());
    }

    void mismatchedWorldSizeGreysTheRest() {
        ClusterMap map;
        map.resize(800, 500);
        map.setLayout(cluster(2), layout(2, 4, 1)); // 8 of 16 GPUs
        QCOMPARE(map.gpuCount(), 16);
        QVERIFY(!map.warning().isEmpty());
        QVERIFY(map.warning().contains(QStringLiteral("8")));
        QVERIFY(map.warning().contains(QStringLiteral("16")));
        QVERIFY(map.describeGpu(12).contains(QStringLiteral("not used")));
        QCOMPARE(map.colorOf(12), map.colorOf(9)); // idle GPUs share the grey
        QVERIFY(map.colorOf(12) != map.colorOf(0));
        const auto points = hitPoints(map);
        QCOMPARE(int(points.size()), 16);
        QCOMPARE(render(map).pixelColor(points.at(12)), map.colorOf(12));

        map.setLayout(cluster(1), layout(4, 4, 1)); // needs 16, has 8
        QCOMPARE(map.gpuCount(), 8);
        QVERIFY(map.warning().contains(QStringLiteral("16")));
    }

    void hoverEmitsTheGpu() {
        ClusterMap map;
        map.resize(600, 400);
        map.setLayout(cluster(2), layout(2, 8, 1));
        QSignalSpy spy(&map, &ClusterMap::gpuHovered);
        const QPoint p = hitPoints(map).at(10);
        QMouseEvent move(QEvent::MouseMove, p, map.mapToGlobal(p), Qt::NoButton, Qt::NoButton,
                         Qt::NoModifier);
        QCoreApplication::sendEvent(&map, &move);
        QCOMPARE(spy.count(), 1);
        QCOMPARE(spy.at(0).at(0).toInt(), 10);
        QCoreApplication::sendEvent(&map, &move); // same GPU: no new signal
        QCOMPARE(spy.count(), 1);
        QEvent leave(QEvent::Leave);
        QCoreApplication::sendEvent(&map, &leave);
        QCOMPARE(spy.count(), 2);
        QCOMPARE(spy.at(1).at(0).toInt(), -1);
    }

    void sixteenThousandGpusRender() {
        ClusterMap map;
        map.resize(1200, 800);
        map.setLayout(cluster(2048), layout(128, 8, 16));
        map.setColorBy(ColorBy::PpStage);
        QCOMPARE(map.gpuCount(), 16384);
        QCOMPARE(map.warning(), QString());
        QImage image;
        QElapsedTimer timer;
        timer.start();
        image = render(map);
        const double ms = static_cast<double>(timer.nsecsElapsed()) / 1e6;
        qInfo("16,384 GPUs rendered in %.2f ms", ms); // reported, not asserted
        timer.restart();
        const QPixmap first = map.grab();
        const double firstMs = static_cast<double>(timer.nsecsElapsed()) / 1e6;
        timer.restart();
        const QPixmap second = map.grab();
        qInfo("widget paint: %.2f ms, again from the cache: %.2f ms", firstMs,
              static_cast<double>(timer.nsecsElapsed()) / 1e6);
        QCOMPARE(first.toImage(), second.toImage());
        const auto points = hitPoints(map);
        QCOMPARE(int(points.size()), 16384);
        for (int rank : {0, 4095, 8191, 16383})
            QCOMPARE(image.pixelColor(points.at(rank)), map.colorOf(rank));
        QVERIFY(map.colorOf(0) != map.colorOf(16383)); // pp stage 0 vs 15
    }
};

QTEST_MAIN(TestClusterMap)
#include "test_cluster_map.moc"
