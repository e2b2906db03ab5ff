// Lines of y against x, with an optional horizontal threshold (a capacity line). Used for
// "memory per GPU vs number of GPUs for ZeRO 0-3" and similar sweeps.
#pragma once

#include "chart.h"

#include <vector>

class QCustomPlot;

namespace shardscope {

// How axis ticks and tooltips print values.
enum class ValueKind { Plain, Bytes, Seconds, Rate };

struct Series {
    QString name;
    std::vector<double> x;
    std::vector<double> y; // same length as x; NaN leaves a gap
};

class SeriesChart : public Chart {
    Q_OBJECT
public:
    explicit SeriesChart(QWidget* parent = nullptr);

    void setAxes(const QString& xLabel, ValueKind xKind, bool logX, const QString& yLabel,
                 ValueKind yKind, bool logY = false);
    void setSeries(std::vector<Series> series);
    // A dashed horizontal line at y with its label; y <= 0 removes it.
    void setThreshold(double y, const QString& label);

    const std::vector<Series>& series() const { return series_; }
    QCustomPlot* plot() const { return plot_; }
    void renderTo(QPainter& painter, const QSize& size) override;

protected:
    void resizeEvent(QResizeEvent* event) override;
    bool event(QEvent* e) override;

private:
    void rebuild();
    QCustomPlot* plot_;
    std::vector<Series> series_;
    double threshold_ = 0;
    QString thresholdLabel_;
    ValueKind xKind_ = ValueKind::Plain, yKind_ = ValueKind::Plain;
};

} // namespace shardscope
