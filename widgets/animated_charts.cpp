#include "animated_charts.h"

#include "chart_style.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QEvent>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>
#include <QHorizontalBarSeries>
#include <QHorizontalStackedBarSeries>
#include <QLegend>
#include <QPainter>
#include <QPieSeries>
#include <QPieSlice>
#include <QStackedBarSeries>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

namespace shardscope {

namespace {

// A chart and its view, themed from the widget's palette, inside `owner` edge to edge.
QChartView* embed(QWidget* owner, QChart* chart) {
    auto* view = new QChartView(chart, owner);
    view->setRenderHint(QPainter::Antialiasing);
    view->setFrameShape(QFrame::NoFrame);
    auto* layout = new QVBoxLayout(owner);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(view);
    chart->setMargins(QMargins(4, 4, 4, 4));
    chart->setBackgroundRoundness(0);
    chart->setAnimationOptions(QChart::SeriesAnimations);
    chart->setAnimationDuration(450);
    chart->legend()->setAlignment(Qt::AlignBottom);
    return view;
}

void styleChart(QChart& chart, const QPalette& palette) {
    const QColor base = palette.color(QPalette::Base), text = palette.color(QPalette::Text);
    chart.setBackgroundBrush(base);
    chart.setPlotAreaBackgroundVisible(false);
    chart.setTitleBrush(text);
    chart.legend()->setLabelColor(text);
    for (QAbstractAxis* axis : chart.axes()) {
        axis->setLabelsColor(text);
        axis->setTitleBrush(text);
        axis->setLinePenColor(detail::mix(base, text, 0.5));
        axis->setGridLineColor(detail::mix(base, text, 0.15));
    }
}

// Draw the chart at `size` in its final state (no animation frame half-way), then put it back
// as the screen has it; returns where its text went, in the painter's coordinates.
std::vector<QRectF> renderChart(QChart* chart, QPainter& painter, const QSize& size) {
    const QSizeF old = chart->size();
    const QChart::AnimationOptions animation = chart->animationOptions();
    chart->setAnimationOptions(QChart::NoAnimation);
    // Two resizes: the second lays the series out at `size` even when that is the size now.
    chart->resize(QSizeF(size) + QSizeF(1, 1));
    chart->resize(QSizeF(size));
    const QRectF source(chart->pos(), QSizeF(size));
    chart->scene()->render(&painter, QRectF(QPointF(0, 0), QSizeF(size)), source);
    std::vector<QRectF> labels;
    for (const QGraphicsItem* item : chart->scene()->items(source)) {
        const auto* simple = qgraphicsitem_cast<const QGraphicsSimpleTextItem*>(item);
        const auto* rich = qgraphicsitem_cast<const QGraphicsTextItem*>(item);
        const QString text = simple ? simple->text() : rich ? rich->toPlainText() : QString();
        if (text.trimmed().isEmpty() || !item->isVisible() || item->boundingRect().isEmpty())
            continue;
        const QRectF r = item->sceneBoundingRect().translated(-source.topLeft());
        labels.push_back(painter.transform().mapRect(r));
    }
    chart->resize(old);
    chart->setAnimationOptions(animation);
    return labels;
}

// Lay the series out at their final state now, without the animation's frames.
void finish(QChart* chart) {
    const QChart::AnimationOptions animation = chart->animationOptions();
    chart->setAnimationOptions(QChart::NoAnimation);
    const QSizeF size = chart->size();
    chart->resize(size + QSizeF(1, 1));
    chart->resize(size);
    chart->setAnimationOptions(animation);
}

// The unit that keeps the largest value under 1000.
std::pair<QString, double> bytesUnit(double most) {
    for (const auto& [name, size] : {std::pair{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}})
        if (most >= size)
            return {name, size};
    return {"B", 1.0};
}

} // namespace

AnimatedChart::AnimatedChart(QWidget* parent)
    : Chart(parent), chart_(new QChart), view_(embed(this, chart_)) {
    setMinimumSize(320, 260); // room for the axes, the legend and bars to read
}

void AnimatedChart::renderTo(QPainter& painter, const QSize& size) {
    clearLabels();
    for (const QRectF& r : renderChart(chart_, painter, size))
        addLabelRect(r);
}

void AnimatedChart::finishAnimations() {
    finish(chart_);
}

void AnimatedChart::changeEvent(QEvent* event) {
    if (event->type() == QEvent::PaletteChange)
        restyle();
    Chart::changeEvent(event);
}

void AnimatedChart::restyle() {
    styleChart(*chart_, palette());
}

AnimatedBarChart::AnimatedBarChart(Direction direction, bool stacked, QWidget* parent)
    : AnimatedChart(parent), direction_(direction), stacked_(stacked) {
    restyle();
}

QString AnimatedBarChart::setName(int i) const {
    return i >= 0 && i < setCount() ? sets_[std::size_t(i)].name : QString();
}

double AnimatedBarChart::value(int set, int category) const {
    if (set < 0 || set >= setCount() || category < 0 || category >= categoryCount())
        return 0;
    const auto& values = sets_[std::size_t(set)].values;
    return std::size_t(category) < values.size() ? values[std::size_t(category)] : 0.0;
}

void AnimatedBarChart::setData(const QStringList& categories, const std::vector<BarSet>& sets,
                               const QString& valueTitle) {
    const bool sameShape =
        series_ != nullptr && categories == categories_ && sets.size() == sets_.size() &&
        std::equal(sets.begin(), sets.end(), sets_.begin(),
                   [](const BarSet& a, const BarSet& b) { return a.name == b.name; });
    categories_ = categories;
    sets_ = sets;
    valueTitle_ = valueTitle;
    // The largest bar (a stack's sum when stacked) sets the unit and the axis.
    double most = 0;
    for (int c = 0; c < categories.size(); ++c) {
        double stack = 0;
        for (const BarSet& s : sets) {
            const double v = std::size_t(c) < s.values.size() ? s.values[std::size_t(c)] : 0.0;
            stack = stacked_ ? stack + v : std::max(stack, v);
        }
        most = std::max(most, stack);
    }
    const double oldScale = scale_;
    std::tie(unit_, scale_) = bytesUnit(most);
    if (!sameShape || oldScale != scale_) {
        rebuild();
    } else {
        // Same bars, new heights: Qt Charts animates each from where it was.
        const QList<QBarSet*> barSets = series_->barSets();
        for (std::size_t s = 0; s < sets.size(); ++s)
            for (int c = 0; c < categories.size(); ++c)
                barSets[qsizetype(s)]->replace(shownAt(c), value(int(s), c) / scale_);
    }
    for (QAbstractAxis* axis : chart_->axes()) {
        if (auto* values = qobject_cast<QValueAxis*>(axis)) {
            values->setRange(0, std::max(most / scale_ * 1.05, 1e-9));
            values->applyNiceNumbers();
            values->setTitleText(valueTitle_ + " (" + unit_ + ")");
        }
    }
}

// Qt Charts puts the first category of a horizontal chart at the bottom: reverse it there, so a
// list (the ops of a layer) reads top to bottom.
int AnimatedBarChart::shownAt(int category) const {
    return direction_ == Direction::Right ? categoryCount() - 1 - category : category;
}

void AnimatedBarChart::setHeading(const QString& heading) {
    chart_->setTitle(heading);
}

void AnimatedBarChart::rebuild() {
    chart_->removeAllSeries();
    for (QAbstractAxis* axis : chart_->axes()) {
        chart_->removeAxis(axis);
        delete axis;
    }
    if (direction_ == Direction::Up)
        series_ = stacked_ ? static_cast<QAbstractBarSeries*>(new QStackedBarSeries)
                           : static_cast<QAbstractBarSeries*>(new QBarSeries);
    else
        series_ = stacked_ ? static_cast<QAbstractBarSeries*>(new QHorizontalStackedBarSeries)
                           : static_cast<QAbstractBarSeries*>(new QHorizontalBarSeries);
    for (std::size_t s = 0; s < sets_.size(); ++s) {
        auto* set = new QBarSet(sets_[s].name);
        QBrush brush(sets_[s].color, sets_[s].style);
        set->setBrush(brush);
        set->setPen(QPen(sets_[s].color.darker(130), 0.5));
        for (int at = 0; at < categoryCount(); ++at)
            set->append(value(int(s), shownAt(at)) / scale_);
        connect(set, &QBarSet::hovered, this, [this, s](bool on, int at) {
            const int c = shownAt(at);
            if (!on) {
                QToolTip::hideText();
                return;
            }
            const BarSet& b = sets_[s];
            const QString note =
                std::size_t(c) < b.notes.size() ? b.notes[std::size_t(c)] : b.tooltip;
            QToolTip::showText(QCursor::pos(),
                               QString("<b>%1</b>, %2: %3 %4<br>%5")
                                   .arg(b.name.toHtmlEscaped(), category(c).toHtmlEscaped())
                                   .arg(value(int(s), c) / scale_, 0, 'g', 3)
                                   .arg(unit_, note.toHtmlEscaped()),
                               this);
        });
        series_->append(set);
    }
    series_->setBarWidth(direction_ == Direction::Up ? 0.7 : 0.8);
    chart_->addSeries(series_);
    auto* categoryAxis = new QBarCategoryAxis;
    for (int at = 0; at < categoryCount(); ++at)
        categoryAxis->append(categories_[shownAt(at)]);
    categoryAxis->setTruncateLabels(false); // an op's name cut to "..." says nothing
    QFont small = categoryAxis->labelsFont();
    small.setPointSizeF(std::max(7.0, font().pointSizeF() * 0.85));
    categoryAxis->setLabelsFont(small);
    auto* valueAxis = new QValueAxis;
    valueAxis->setLabelFormat("%.3g");
    if (direction_ == Direction::Up) {
        chart_->addAxis(categoryAxis, Qt::AlignBottom);
        chart_->addAxis(valueAxis, Qt::AlignLeft);
    } else {
        chart_->addAxis(categoryAxis, Qt::AlignLeft);
        chart_->addAxis(valueAxis, Qt::AlignBottom);
    }
    series_->attachAxis(categoryAxis);
    series_->attachAxis(valueAxis);
    restyle();
}

QSize AnimatedBarChart::sizeHint() const {
    return {520, 320};
}

ShareChart::ShareChart(QWidget* parent) : AnimatedChart(parent), series_(new QPieSeries) {
    series_->setHoleSize(0.45);
    series_->setPieSize(0.75);
    chart_->addSeries(series_);
    chart_->legend()->setAlignment(Qt::AlignRight);
    restyle();
}

void ShareChart::setSegments(const std::vector<Segment>& segments) {
    const bool sameShape =
        segments.size() == segments_.size() &&
        std::equal(segments.begin(), segments.end(), segments_.begin(),
                   [](const Segment& a, const Segment& b) { return a.label == b.label; });
    segments_ = segments;
    double total = 0;
    for (const Segment& s : segments)
        total += std::max(0.0, s.value);
    if (!sameShape) {
        series_->clear();
        for (std::size_t i = 0; i < segments.size(); ++i) {
            auto* slice = series_->append(segments[i].label, 0);
            slice->setBrush(detail::categoryColor(int(i)));
            slice->setPen(QPen(palette().color(QPalette::Base), 1));
            slice->setLabelPosition(QPieSlice::LabelOutside);
            connect(slice, &QPieSlice::hovered, this, [this, i, slice](bool on) {
                slice->setExploded(on);
                if (!on) {
                    QToolTip::hideText();
                    return;
                }
                const Segment& s = segments_[i];
                QToolTip::showText(QCursor::pos(),
                                   QString("<b>%1</b>: %2 (%3 %)<br>%4")
                                       .arg(s.label.toHtmlEscaped(),
                                            detail::formatValue(s.value, ValueKind::Bytes))
                                       .arg(100.0 * slice->percentage(), 0, 'f', 1)
                                       .arg(s.tooltip.toHtmlEscaped()),
                                   this);
            });
        }
    }
    // New values turn the slices from where they were.
    const QList<QPieSlice*> slices = series_->slices();
    for (std::size_t i = 0; i < segments.size(); ++i) {
        QPieSlice* slice = slices[qsizetype(i)];
        const double share = total > 0 ? std::max(0.0, segments[i].value) / total : 0.0;
        slice->setValue(std::max(0.0, segments[i].value));
        slice->setLabel(QString("%1 %2 %").arg(segments[i].label).arg(100 * share, 0, 'f', 1));
        slice->setLabelVisible(share >= 0.03);
    }
    restyle();
}

double ShareChart::shareOf(const QString& label) const {
    double total = 0, mine = 0;
    for (const Segment& s : segments_) {
        total += std::max(0.0, s.value);
        if (s.label == label)
            mine = std::max(0.0, s.value);
    }
    return total > 0 ? mine / total : 0.0;
}

void ShareChart::restyle() {
    AnimatedChart::restyle();
    for (QPieSlice* slice : series_->slices()) {
        slice->setLabelColor(palette().color(QPalette::Text));
        slice->setPen(QPen(palette().color(QPalette::Base), 1)); // gaps in the theme's colour
    }
}

QSize ShareChart::sizeHint() const {
    return {420, 300};
}

} // namespace shardscope
