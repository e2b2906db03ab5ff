// A collective played out on GPUs around a ring: each GPU's buffer as numbered coloured chunks,
// each filled as far as it holds the sum of all ranks' data for that chunk, and arrows for what
// moves in the current step. GPU names sit outside the ring, where no arrow runs. The animation
// is a time in steps: 2.5 is halfway through the third step.
#pragma once

#include "chart.h"
#include "sched/collective_plan.h"

#include <QPolygonF>
#include <vector>

namespace shardscope {

class RingView : public Chart {
    Q_OBJECT
public:
    explicit RingView(QWidget* parent = nullptr);

    void setPlan(const CollectivePlan& plan, const QString& caption);
    // A second line under the caption: where the animation is ("step 3 of 14, 1.3 ms of 4.4 ms").
    void setStatus(const QString& status);
    int stepCount() const { return int(plan_.steps.size()); }

    // 0 .. stepCount(): steps before floor(t) are done, the next one is under way.
    void setTime(double steps);
    double time() const { return time_; }
    int currentStep() const; // the step under way, or stepCount() when finished
    QString phase() const;   // the current step's phase, or "done"

    // Share of all ranks' contributions that chunk `chunk` of `rank` holds at the current time.
    double fillOf(int rank, int chunk) const;
    QColor chunkColor(int chunk) const;

    // The arrows of the last renderTo, tail to head, for the test that no label lies on one.
    const std::vector<QPolygonF>& arrowPaths() const { return arrows_; }

    QSize sizeHint() const override;
    void renderTo(QPainter& painter, const QSize& size) override;

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    CollectivePlan plan_;
    std::vector<ChunkSources> sources_;
    std::vector<QString> rankLabels_;
    QString caption_;
    QString status_;
    double time_ = 0;
    std::vector<QPolygonF> arrows_;
};

} // namespace shardscope
