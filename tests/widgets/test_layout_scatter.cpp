// LayoutScatter: points, the Pareto front, picking by pixel and click signals.
#include "layout_scatter.h"

#include <QSignalSpy>
#include <QtTest>
#include <qcustomplot.h>

using namespace shardscope;

namespace {

Candidate candidate(double gb, double tokens, bool fits) {
    Candidate c;
    c.memory = gb * 1e9;
    c.tokensPerSecond = tokens;
    c.fits = fits;
    c.config.dp = 8;
    return c;
}

std::vector<Candidate> sample() {
    return {candidate(20, 100e3, true), candidate(40, 300e3, true), candidate(30, 150e3, true),
            candidate(60, 250e3, true), candidate(90, 500e3, false)};
}

QPoint pixelOf(const LayoutScatter& s, const Candidate& c) {
    const QCustomPlot* plot = s.plot();
    const QPoint p(qRound(plot->xAxis->coordToPixel(c.memory / 1e9)),
                   qRound(plot->yAxis->coordToPixel(c.tokensPerSecond)));
    return plot->mapTo(&s, p);
}

} // namespace

class TestLayoutScatter : public QObject {
    Q_OBJECT

private slots:
    void init() {
        scatter_ = std::make_unique<LayoutScatter>();
        scatter_->resize(800, 500);
        scatter_->show();
        QVERIFY(QTest::qWaitForWindowExposed(scatter_.get()));
        const auto c = sample();
        scatter_->setCandidates(c, paretoFront(c), 80e9);
    }
    void cleanup() { scatter_.reset(); }

    void pointsFrontAndCapacity() {
        QCOMPARE(scatter_->pointCount(), std::size_t(5));
        QCustomPlot* plot = scatter_->plot();
        // not fitting, fitting, Pareto front, highlight ring
        QCOMPARE(plot->graphCount(), 4);
        QCOMPARE(plot->graph(0)->data()->size(), 1);
        QCOMPARE(plot->graph(1)->data()->size(), 4);
        // Front of the fitting points: 20 GB/100k, 30 GB/150k, 40 GB/300k, by memory.
        QCPGraph* front = plot->graph(2);
        QCOMPARE(front->data()->size(), 3);
        QCOMPARE(front->data()->at(0)->key, 20.0);
        QCOMPARE(front->data()->at(2)->key, 40.0);
        QCOMPARE(front->data()->at(2)->value, 300e3);
        QVERIFY(front->lineStyle() != QCPGraph::lsNone);
        // The capacity line is vertical at 80 GB and the x range reaches the 90 GB point.
        bool capacity = false;
        for (int i = 0; i < plot->itemCount(); ++i)
            if (auto* l = qobject_cast<QCPItemStraightLine*>(plot->item(i)))
                capacity = l->point1->coords().x() == 80.0 && l->point2->coords().x() == 80.0;
        QVERIFY(capacity);
        QVERIFY(plot->xAxis->range().upper >= 90.0);
    }

    void candidateAtFindsEachPoint() {
        const auto c = sample();
        for (std::size_t i = 0; i < c.size(); ++i) {
            const QPoint p = pixelOf(*scatter_, c[i]);
            QCOMPARE(scatter_->candidateAt(p), int(i));
            QCOMPARE(scatter_->candidateAt(p + QPoint(3, -3)), int(i)); // within a few pixels
        }
        QCOMPARE(scatter_->candidateAt(pixelOf(*scatter_, c[0]) + QPoint(0, -40)), -1);
        QCOMPARE(scatter_->candidateAt(QPoint(1, 1)), -1);
    }

    void clickEmitsCandidateClicked() {
        QSignalSpy spy(scatter_.get(), &LayoutScatter::candidateClicked);
        const auto c = sample();
        const QPoint p = scatter_->plot()->mapFrom(scatter_.get(), pixelOf(*scatter_, c[3]));
        QTest::mouseClick(scatter_->plot(), Qt::LeftButton, Qt::NoModifier, p);
        QCOMPARE(spy.count(), 1);
        QCOMPARE(spy.at(0).at(0).toInt(), 3);
        QTest::mouseClick(scatter_->plot(), Qt::LeftButton, Qt::NoModifier, QPoint(2, 2));
        QCOMPARE(spy.count(), 1); // nothing there
    }

    void highlightDrawsARing() {
        scatter_->setHighlighted(1);
        QCOMPARE(scatter_->highlighted(), 1);
        QCPGraph* ring = scatter_->plot()->graph(3);
        QCOMPARE(ring->data()->size(), 1);
        QCOMPARE(ring->data()->at(0)->key, 40.0);
        QCOMPARE(ring->scatterStyle().shape(), QCPScatterStyle::ssCircle);
        scatter_->setHighlighted(99);
        QCOMPARE(scatter_->highlighted(), -1);
        QCOMPARE(ring->data()->size(), 0);
    }

    void manyPoints() {
        std::vector<Candidate> many;
        many.reserve(130000);
        for (int i = 0; i < 130000; ++i) {
            const double gb = 10 + (i % 1000) * 0.15;
            many.push_back(candidate(gb, 1e5 + (i * 7919 % 100000) * 10.0, gb < 80));
        }
        scatter_->setCandidates(many, paretoFront(many), 80e9);
        QCOMPARE(scatter_->pointCount(), std::size_t(130000));
        const QPoint p = pixelOf(*scatter_, many[12345]);
        // Candidates share pixels among 130,000: the one found is drawn where the click was.
        const int hit = scatter_->candidateAt(p);
        QVERIFY(hit >= 0 && hit < int(many.size()));
        QVERIFY((pixelOf(*scatter_, many[std::size_t(hit)]) - p).manhattanLength() <= 4);
    }

private:
    std::unique_ptr<LayoutScatter> scatter_;
};

QTEST_MAIN(TestLayoutScatter)
#include "test_layout_scatter.moc"
