// Lines of a value against training step that grow while a run goes on: one per rank, or a
// median with the band the ranks span, and a dashed reference line (the planner's prediction, or
// the data's loss floor). New data replaces the graphs' data in place, and the plot redraws once
// when the event loop next runs, so many updates in one frame cost one repaint.
#pragma once

#include "chart.h"
#include "series_chart.h"

#include <QVector>
#include <optional>
#include <vector>

class QCustomPlot;
class QCPItemText;
class QCPGraph;

namespace shardscope {

struct LiveLine {
    QString name;
    QVector<double> x, y;
    bool dashed = false;
};

struct LiveBand {
    QVector<double> x, lo, hi;
};

class LivePlot : public Chart {
    Q_OBJECT
public:
    explicit LivePlot(QWidget* parent = nullptr);

    void setAxes(const QString& xLabel, const QString& yLabel, ValueKind yKind);
    void setData(std::vector<LiveLine> lines, std::optional<LiveBand> band = std::nullopt);
    // A dashed horizontal line with its label; NaN (or <= 0) removes it.
    void setReference(double y, const QString& label);

    int lineCount() const { return int(lines_.size()); }
    const std::vector<LiveLine>& lines() const { return lines_; }
    bool hasBand() const { return band_.has_value(); }
    double reference() const { return reference_; }
    QCustomPlot* plot() const { return plot_; }
    void renderTo(QPainter& painter, const QSize& size) override;

protected:
    bool event(QEvent* e) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void restyle(); // makes the graphs and the reference line
    void refill();  // gives the graphs their data and rescales
    void rescale();
    QCustomPlot* plot_;
    std::vector<QCPGraph*> graphs_;
    QCPGraph* bandLow_ = nullptr;
    QCPGraph* bandHigh_ = nullptr;
    std::vector<LiveLine> lines_;
    std::optional<LiveBand> band_;
    double reference_ = 0;
    QString referenceLabel_;
    QCPItemText* referenceText_ = nullptr; // owned by the plot
    ValueKind yKind_ = ValueKind::Plain;
};

} // namespace shardscope
