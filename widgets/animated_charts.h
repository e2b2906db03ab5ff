// Charts that move from one state to the next when the numbers change (a ZeRO stage, dp, tp,
// recompute), so a student sees what changed rather than two pictures to compare. They run on
// Qt Charts, whose series animations do exactly this; pages hand them plain numbers and nothing
// outside animated_charts.cpp names Qt Charts, so either chart library can stand in for the
// other. QCustomPlot keeps the live and large plots.
#pragma once

#include "breakdown_bar.h"
#include "chart.h"

#include <QStringList>
#include <vector>

class QChart;
class QChartView;
class QAbstractBarSeries;
class QPieSeries;

namespace shardscope {

struct BarSet {
    QString name;
    QColor color;
    Qt::BrushStyle style = Qt::SolidPattern; // hatched sets read as "copies" of the solid ones
    std::vector<double> values;              // one per category, in bytes
    QString tooltip;                         // what the set is, where its numbers come from
    std::vector<QString> notes;              // per category, shown on hover when given
};

// What the charts below share: a Qt Charts chart in its view, themed from the widget's palette,
// drawn at its final state (never an animation's frame) for files and headless renders.
class AnimatedChart : public Chart {
    Q_OBJECT
public:
    void renderTo(QPainter& painter, const QSize& size) override;
    void finishAnimations() override;

protected:
    explicit AnimatedChart(QWidget* parent);
    void changeEvent(QEvent* event) override;
    virtual void restyle();

    QChart* chart_;
    QChartView* view_;
};

// Bars in categories, stacked or side by side, growing up (categories along the bottom) or to
// the right (categories down the left, read top to bottom). Values are bytes; the axis picks
// KB, MB or GB.
class AnimatedBarChart : public AnimatedChart {
    Q_OBJECT
public:
    enum class Direction { Up, Right };
    AnimatedBarChart(Direction direction, bool stacked, QWidget* parent = nullptr);

    void setData(const QStringList& categories, const std::vector<BarSet>& sets,
                 const QString& valueTitle);
    // A line above the bars ("ZeRO-1 over the 2 GPUs of a data-parallel group").
    void setHeading(const QString& heading);
    int categoryCount() const { return int(categories_.size()); }
    int setCount() const { return int(sets_.size()); }
    QString category(int i) const { return categories_.value(i); }
    QString setName(int i) const;
    double value(int set, int category) const; // bytes, as given
    // The unit the value axis shows ("GB") and its size in bytes.
    QString unit() const { return unit_; }

    QSize sizeHint() const override;

private:
    void rebuild();
    int shownAt(int category) const; // the same map both ways: it is its own inverse

    Direction direction_;
    bool stacked_;
    QAbstractBarSeries* series_ = nullptr;
    QStringList categories_;
    std::vector<BarSet> sets_;
    QString valueTitle_, unit_ = "B";
    double scale_ = 1;
};

// A ring of shares (memory by category): the slices turn to their new sizes when the numbers
// change. Slices under 3 % keep their label to the legend.
class ShareChart : public AnimatedChart {
    Q_OBJECT
public:
    explicit ShareChart(QWidget* parent = nullptr);

    void setSegments(const std::vector<Segment>& segments); // values in bytes
    int segmentCount() const { return int(segments_.size()); }
    double shareOf(const QString& label) const; // 0..1 of the total shown now

    QSize sizeHint() const override;

protected:
    void restyle() override;

private:
    QPieSeries* series_;
    std::vector<Segment> segments_;
};

} // namespace shardscope
