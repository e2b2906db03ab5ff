#include "series_chart.h"

#include "chart_style.h"

#include <QHelpEvent>
#include <QResizeEvent>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

namespace shardscope {

namespace {

QSharedPointer<QCPAxisTicker> tickerFor(ValueKind kind, bool log) {
    auto format = [kind](double v) { return detail::formatTick(v, kind); };
    if (log)
        return QSharedPointer<QCPAxisTicker>(new detail::FormatLogTicker(format));
    return QSharedPointer<QCPAxisTicker>(new detail::FormatTicker(format));
}

// The extent of the values an axis must show; log axes only see positive values.
struct Extent {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -std::numeric_limits<double>::infinity();
    void add(double v, bool log) {
        if (!std::isfinite(v) || (log && v <= 0))
            return;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    bool empty() const { return lo > hi; }
};

QCPRange rangeFor(const Extent& e, bool log, bool fromZero) {
    if (e.empty())
        return log ? QCPRange(1, 10) : QCPRange(0, 1);
    if (log) // a little room on both sides, in ratio terms
        return QCPRange(e.lo / 1.25, e.hi * 1.25);
    const double lo = fromZero ? std::min(0.0, e.lo) : e.lo;
    const double span = e.hi > lo ? e.hi - lo : std::max(std::fabs(e.hi), 1.0);
    return QCPRange(fromZero && lo == 0 ? 0 : lo - 0.05 * span, e.hi + 0.1 * span);
}

QString axisName(const QCPAxis* axis, const char* fallback) {
    return axis->label().isEmpty() ? QString::fromLatin1(fallback) : axis->label();
}

} // namespace

SeriesChart::SeriesChart(QWidget* parent) : Chart(parent), plot_(new QCustomPlot(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(plot_);
    detail::setUpPlot(*plot_, false);
    detail::placeLegendBelow(*plot_, 4); // over the plot it would hide the lines it names
    setMinimumSize(320, 220);
    setAxes(QString(), ValueKind::Plain, false, QString(), ValueKind::Plain, false);
}

void SeriesChart::setAxes(const QString& xLabel, ValueKind xKind, bool logX, const QString& yLabel,
                          ValueKind yKind, bool logY) {
    xKind_ = xKind;
    yKind_ = yKind;
    plot_->xAxis->setLabel(xLabel);
    plot_->yAxis->setLabel(yLabel);
    plot_->xAxis->setScaleType(logX ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    plot_->yAxis->setScaleType(logY ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    plot_->xAxis->setTicker(tickerFor(xKind, logX));
    plot_->yAxis->setTicker(tickerFor(yKind, logY));
    // Our labels are final: keep QCustomPlot from rewriting "1e+10" as powers.
    plot_->xAxis->setNumberFormat(QStringLiteral("g"));
    plot_->yAxis->setNumberFormat(QStringLiteral("g"));
    rebuild();
}

void SeriesChart::setSeries(std::vector<Series> series) {
    series_ = std::move(series);
    rebuild();
}

void SeriesChart::setThreshold(double y, const QString& label) {
    threshold_ = y;
    thresholdLabel_ = label;
    rebuild();
}

void SeriesChart::rebuild() {
    plot_->clearGraphs();
    plot_->clearItems();
    plot_->legend->clearItems();
    detail::stylePlot(*plot_, palette());
    const bool logX = plot_->xAxis->scaleType() == QCPAxis::stLogarithmic;
    const bool logY = plot_->yAxis->scaleType() == QCPAxis::stLogarithmic;

    Extent xs, ys;
    for (std::size_t i = 0; i < series_.size(); ++i) {
        const Series& s = series_[i];
        QCPGraph* graph = plot_->addGraph();
        graph->setName(s.name);
        const QColor color = detail::categoryColor(static_cast<int>(i));
        graph->setPen(QPen(color, 2));
        graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, 5));
        QVector<double> x, y;
        const std::size_t n = std::min(s.x.size(), s.y.size());
        for (std::size_t k = 0; k < n; ++k) {
            x.push_back(s.x[k]);
            y.push_back(s.y[k]); // NaN is kept: QCPGraph draws it as a gap
            if (std::isfinite(s.y[k])) {
                xs.add(s.x[k], logX);
                ys.add(s.y[k], logY);
            }
        }
        graph->setData(x, y);
        graph->addToLegend();
    }

    if (threshold_ > 0) {
        ys.add(threshold_ * 1.25, logY); // room above the line for its label
        const QColor fg = palette().color(QPalette::Text);
        auto* line = new QCPItemStraightLine(plot_);
        line->point1->setCoords(logX ? 1.0 : 0.0, threshold_);
        line->point2->setCoords(logX ? 10.0 : 1.0, threshold_);
        line->setPen(QPen(fg, 1.5, Qt::DashLine));
        auto* label = new QCPItemText(plot_);
        label->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        label->position->setTypeY(QCPItemPosition::ptPlotCoords);
        label->position->setCoords(0.01, threshold_);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        label->setText(thresholdLabel_.isEmpty() ? detail::formatValue(threshold_, yKind_)
                                                 : thresholdLabel_);
        label->setColor(fg);
        label->setPadding(QMargins(2, 0, 2, 2));
    }

    // An empty legend stays in the layout: a hidden one there squeezes the axis rect sideways.
    plot_->legend->setVisible(true);
    plot_->xAxis->setRange(rangeFor(xs, logX, false));
    plot_->yAxis->setRange(rangeFor(ys, logY, true));
    detail::fitLegendColumns(*plot_, width(), 4);
    plot_->replot(QCustomPlot::rpQueuedRefresh);
}

void SeriesChart::renderTo(QPainter& painter, const QSize& size) {
    clearLabels();
    detail::fitLegendColumns(*plot_, size.width(), 4);
    for (const QRectF& r : detail::renderPlot(*plot_, painter, size))
        addLabelRect(r);
    detail::fitLegendColumns(*plot_, width(), 4);
}

void SeriesChart::resizeEvent(QResizeEvent* event) {
    detail::fitLegendColumns(*plot_, event->size().width(), 4);
    Chart::resizeEvent(event);
    // The plot has already redrawn for its new size (it is resized first): again, fitted.
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool SeriesChart::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        // The nearest data point within a few pixels, named with its series.
        auto* help = static_cast<QHelpEvent*>(e);
        const QPointF p = plot_->mapFrom(this, help->pos());
        QString text;
        double best = 8.0 * 8.0;
        for (const Series& s : series_) {
            const std::size_t n = std::min(s.x.size(), s.y.size());
            for (std::size_t k = 0; k < n; ++k) {
                if (!std::isfinite(s.y[k]))
                    continue;
                const double dx = plot_->xAxis->coordToPixel(s.x[k]) - p.x();
                const double dy = plot_->yAxis->coordToPixel(s.y[k]) - p.y();
                if (dx * dx + dy * dy <= best) {
                    best = dx * dx + dy * dy;
                    text = s.name + QLatin1Char('\n') + axisName(plot_->xAxis, "x") +
                           QStringLiteral(": ") + detail::formatValue(s.x[k], xKind_) +
                           QLatin1Char('\n') + axisName(plot_->yAxis, "y") + QStringLiteral(": ") +
                           detail::formatValue(s.y[k], yKind_);
                }
            }
        }
        detail::showToolTip(help, this, text);
        return true;
    }
    if (e->type() == QEvent::PaletteChange)
        rebuild();
    return Chart::event(e);
}

} // namespace shardscope
