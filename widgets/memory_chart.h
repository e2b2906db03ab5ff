// Memory per GPU as stacked bars by category (weights, gradients, optimizer state, activations,
// temporary buffers, runtime overhead) against a horizontal capacity line.
#pragma once

#include "chart.h"
#include "plan/estimate.h"

#include <array>
#include <vector>

class QCustomPlot;

namespace shardscope {

struct MemoryBar {
    QString label; // "stage 0", "ZeRO-3", "GPU 5", ...
    MemoryBreakdown memory;
    // A prediction to draw across the bar (a dashed marker), e.g. the planner's bytes for a rank
    // whose bar is measured; 0: none. `predictedCovers` says which categories it counts
    // (shown in the tooltip, which compares it with the bar's bytes in those categories).
    double predicted = 0;
    std::array<bool, 6> predictedCovers = {true, true, true, true, true, true};
};

class MemoryChart : public Chart {
    Q_OBJECT
public:
    static constexpr int kCategories = 6;
    // Display names in stacking order, bottom first.
    static const std::array<QString, kCategories>& categoryNames();
    // The category values of a breakdown, in the same order (bytes).
    static std::array<double, kCategories> categoryBytes(const MemoryBreakdown& m);

    explicit MemoryChart(QWidget* parent = nullptr);

    // Bars left to right. Capacity <= 0 draws no line.
    void setBars(std::vector<MemoryBar> bars, double capacityBytes, const QString& capacityLabel);
    // Formula and source per category, shown when hovering a segment (with the value).
    void setCategoryTooltips(const std::array<QString, kCategories>& tooltips);

    const std::vector<MemoryBar>& bars() const { return bars_; }
    double capacity() const { return capacity_; }
    // The tooltip text for the point `pos` in widget coordinates, empty when over nothing.
    QString tooltipAt(const QPoint& pos) const;

    QCustomPlot* plot() const { return plot_; }
    void renderTo(QPainter& painter, const QSize& size) override;

protected:
    bool event(QEvent* e) override; // tooltips, palette changes
    void resizeEvent(QResizeEvent* event) override;

private:
    void rebuild();
    void fitTickLabels(int widthPixels);
    QCustomPlot* plot_;
    std::vector<MemoryBar> bars_;
    double capacity_ = 0;
    QString capacityLabel_;
    std::array<QString, kCategories> tooltips_;
    double unit_ = 1e9; // GB, or MB for small bars
};

} // namespace shardscope
