// One horizontal stacked bar: how a total splits into parts (the step time into compute,
// exposed communication per axis, bubble and optimizer), with a legend and the share of each.
#pragma once

#include "chart.h"
#include "series_chart.h"

#include <vector>

namespace shardscope {

struct Segment {
    QString label; // "Compute"
    double value = 0;
    QString tooltip; // formula and source; the value and share are added
};

class BreakdownBar : public Chart {
    Q_OBJECT
public:
    explicit BreakdownBar(QWidget* parent = nullptr);

    void setSegments(std::vector<Segment> segments, ValueKind kind);
    const std::vector<Segment>& segments() const { return segments_; }
    // Tooltip for a point in widget coordinates, empty when over nothing.
    QString tooltipAt(const QPoint& pos) const;

    QSize sizeHint() const override;
    // The legend wraps, so the height needed follows the width.
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override;
    void renderTo(QPainter& painter, const QSize& size) override;

protected:
    void paintEvent(QPaintEvent* event) override;
    bool event(QEvent* e) override;

private:
    std::vector<Segment> segments_;
    ValueKind kind_ = ValueKind::Seconds;
};

} // namespace shardscope
