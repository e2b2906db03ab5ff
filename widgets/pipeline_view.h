// A pipeline timeline as a Gantt chart: one row per rank, time left to right, forward, backward
// (input and weight gradient) in their own colours with the microbatch number, idle time shaded
// as bubble. A playhead animates the run: ops before it are drawn, the op under it partly,
// later ops only outlined. Painting uses geometry and labels prepared in setTimeline, so a frame
// allocates nothing.
#pragma once

#include "chart.h"
#include "sched/pipeline_simulator.h"

#include <vector>

namespace shardscope {

class PipelineView : public Chart {
    Q_OBJECT
public:
    explicit PipelineView(QWidget* parent = nullptr);

    // `caption` is drawn above the chart ("1F1B: bubble 27.3 %").
    void setTimeline(const PipelineTimeline& timeline, int virtualStages, const QString& caption);
    void clear(const QString& message); // nothing to draw, and why
    // Intervals each rank spent blocked (a measured timeline's wait spans), drawn as a red strip
    // along the bottom of its row; setTimeline clears them.
    void setWaits(std::vector<std::vector<std::pair<double, double>>> waits);
    // Transfers to and from neighbouring ranks (sends and receives, posted to complete), drawn
    // as a dark strip along the top of each row; setTimeline clears them.
    void setTransfers(std::vector<std::vector<std::pair<double, double>>> transfers);
    // Time shown on the shared axis (to compare two schedules on one scale); <= 0: own makespan.
    void setTimeScale(double seconds);

    void setPlayhead(double time);
    void renderComplete(QPainter& painter, const QSize& size) override; // the playhead at the end
    int printHeight(int width) const override;                          // a row per rank
    double playhead() const { return playhead_; }
    double makespan() const { return makespan_; }

    // The op (index into the rank's list) that runs at `time` on `rank`, or -1 when idle.
    int opAt(int rank, double time) const;
    // How much of op `index` on `rank` is drawn at the current playhead: 0 (not started) to 1.
    double progressOf(int rank, int index) const;
    // The tooltip for a point in widget coordinates, empty when over nothing.
    QString tooltipAt(const QPoint& pos) const;

    QColor colorOf(OpKind kind) const;
    QSize sizeHint() const override;
    void renderTo(QPainter& painter, const QSize& size) override;

protected:
    void paintEvent(QPaintEvent* event) override;
    bool event(QEvent* e) override;

private:
    struct Cell {
        int rank;
        double start, end;
        OpKind kind;
        int chunk;
        QString label; // the microbatch number, made once
        QString tip;
    };
    struct Frame; // where rows and time map to pixels for a size
    Frame frameFor(const QSize& size) const;

    std::vector<Cell> cells_;
    std::vector<std::vector<int>> byRank_; // indices into cells_, per rank, in time order
    int ranks_ = 0;
    int virtualStages_ = 1;
    double makespan_ = 0;
    double scale_ = 0;
    double playhead_ = 0;
    QString caption_;
    QString message_;
    std::vector<std::vector<std::pair<double, double>>> waits_, transfers_;
    std::vector<QString> rankLabels_; // "rank 3", made once
    QString makespanLabel_;
};

} // namespace shardscope
