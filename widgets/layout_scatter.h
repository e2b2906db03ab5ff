// Every layout a search evaluated, memory per GPU (x) against throughput (y), with the GPU's
// capacity as a vertical line and the Pareto front drawn through the layouts nothing beats.
#pragma once

#include "chart.h"
#include "plan/search.h"

#include <vector>

class QCustomPlot;
class QCPGraph;

namespace shardscope {

class LayoutScatter : public Chart {
    Q_OBJECT
public:
    explicit LayoutScatter(QWidget* parent = nullptr);

    // `front` holds indices into `candidates` (paretoFront()); capacity in bytes.
    void setCandidates(const std::vector<Candidate>& candidates,
                       const std::vector<std::size_t>& front, double capacityBytes);
    void setHighlighted(int index); // -1 for none
    int highlighted() const { return highlighted_; }
    // The candidate nearest a point in widget coordinates (within a few pixels), or -1.
    int candidateAt(const QPoint& pos) const;

    std::size_t pointCount() const { return memory_.size(); }
    QCustomPlot* plot() const { return plot_; }
    void renderTo(QPainter& painter, const QSize& size) override;

signals:
    void candidateClicked(int index);

protected:
    bool event(QEvent* e) override;

private:
    void rebuild();
    void updateHighlight();
    void setPointStyle(bool vector);
    QCustomPlot* plot_;
    QCPGraph* highlight_ = nullptr;           // the ring around the highlighted point
    std::vector<double> memory_, throughput_; // GB per GPU, tokens/s
    std::vector<ParallelConfig> configs_;     // for tooltips
    std::vector<bool> fits_;
    std::vector<std::size_t> front_;
    double capacity_ = 0;
    int highlighted_ = -1;
    QPoint pressPos_;
};

} // namespace shardscope
