#include "live_plot.h"

#include "chart_style.h"

#include <QHelpEvent>
#include <QResizeEvent>
#include <QVBoxLayout>
#include <cmath>
#include <limits>

namespace shardscope {

LivePlot::LivePlot(QWidget* parent) : Chart(parent), plot_(new QCustomPlot(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(plot_);
    detail::setUpPlot(*plot_, false);
    detail::placeLegendBelow(*plot_, 4); // over the plot it would hide the lines it names
    // Drawn without antialiasing: thousands of points per line, redrawn live.
    plot_->setNotAntialiasedElements(QCP::aePlottables);
    setMinimumSize(280, 180);
    restyle();
}

void LivePlot::setAxes(const QString& xLabel, const QString& yLabel, ValueKind yKind) {
    yKind_ = yKind;
    plot_->xAxis->setLabel(xLabel);
    plot_->yAxis->setLabel(yLabel);
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(
        new detail::FormatTicker([yKind](double v) { return detail::formatTick(v, yKind); })));
    plot_->yAxis->setNumberFormat(QStringLiteral("g"));
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void LivePlot::setData(std::vector<LiveLine> lines, std::optional<LiveBand> band) {
    const bool reshaped = lines.size() != lines_.size() || band.has_value() != band_.has_value();
    lines_ = std::move(lines);
    band_ = std::move(band);
    if (reshaped)
        restyle(); // graphs are made when the set of lines changes, not on every update
    refill();
}

void LivePlot::refill() {
    for (std::size_t i = 0; i < lines_.size(); ++i)
        graphs_[i]->setData(lines_[i].x, lines_[i].y, true);
    if (band_) {
        bandLow_->setData(band_->x, band_->lo, true);
        bandHigh_->setData(band_->x, band_->hi, true);
    }
    rescale();
}

void LivePlot::setReference(double y, const QString& label) {
    reference_ = std::isfinite(y) && y > 0 ? y : 0;
    referenceLabel_ = label;
    restyle();
    refill();
}

void LivePlot::restyle() {
    plot_->clearGraphs();
    plot_->clearItems();
    referenceText_ = nullptr;
    plot_->legend->clearItems();
    detail::stylePlot(*plot_, palette());
    graphs_.clear();
    bandLow_ = bandHigh_ = nullptr;
    if (band_) {
        const QColor color = detail::categoryColor(0);
        QColor fill = color;
        fill.setAlpha(50);
        bandLow_ = plot_->addGraph();
        bandHigh_ = plot_->addGraph();
        bandHigh_->setPen(Qt::NoPen);
        bandLow_->setPen(Qt::NoPen);
        bandHigh_->setBrush(fill);
        bandHigh_->setChannelFillGraph(bandLow_);
        bandHigh_->setName(tr("min to max across ranks"));
        bandHigh_->addToLegend();
    }
    for (std::size_t i = 0; i < lines_.size(); ++i) {
        QCPGraph* g = plot_->addGraph();
        g->setName(lines_[i].name);
        g->setPen(QPen(detail::categoryColor(int(i)), 1.5,
                       lines_[i].dashed ? Qt::DashLine : Qt::SolidLine));
        g->addToLegend();
        graphs_.push_back(g);
    }
    if (reference_ > 0) {
        const QColor fg = palette().color(QPalette::Text);
        auto* line = new QCPItemStraightLine(plot_);
        line->point1->setCoords(0, reference_);
        line->point2->setCoords(1, reference_);
        line->setPen(QPen(fg, 1.2, Qt::DashLine));
        auto* label = new QCPItemText(plot_);
        label->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        label->position->setTypeY(QCPItemPosition::ptPlotCoords);
        label->position->setCoords(0.01, reference_);
        referenceText_ = label; // rescale() puts it above or under its line
        label->setText(referenceLabel_ + QStringLiteral(": ") +
                       detail::formatValue(reference_, yKind_));
        label->setColor(fg);
    }
    // An empty legend stays in the layout: a hidden one there squeezes the axis rect sideways.
    plot_->legend->setVisible(true);
    detail::fitLegendColumns(*plot_, width(), 4);
}

void LivePlot::resizeEvent(QResizeEvent* event) {
    detail::fitLegendColumns(*plot_, event->size().width(), 4);
    Chart::resizeEvent(event);
    // The plot has already redrawn for its new size (it is resized first): again, fitted.
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void LivePlot::rescale() {
    double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
    auto take = [&](const QVector<double>& xs, const QVector<double>& ys) {
        for (int i = 0; i < std::min(xs.size(), ys.size()); ++i) {
            if (!std::isfinite(ys[i]))
                continue;
            x0 = std::min(x0, xs[i]);
            x1 = std::max(x1, xs[i]);
            y0 = std::min(y0, ys[i]);
            y1 = std::max(y1, ys[i]);
        }
    };
    for (const LiveLine& l : lines_)
        take(l.x, l.y);
    if (band_) {
        take(band_->x, band_->lo);
        take(band_->x, band_->hi);
    }
    // The reference's label sits above its line, unless the line tops the data: then under it,
    // inside the plot rather than cut off at its top.
    if (referenceText_ != nullptr)
        referenceText_->setPositionAlignment(
            Qt::AlignLeft | (x0 <= x1 && reference_ < y1 ? Qt::AlignBottom : Qt::AlignTop));
    if (reference_ > 0) {
        y0 = std::min(y0, reference_);
        y1 = std::max(y1, reference_);
    }
    if (x0 > x1) {
        plot_->xAxis->setRange(0, 1);
        plot_->yAxis->setRange(0, 1);
    } else {
        plot_->xAxis->setRange(x0, x1 > x0 ? x1 : x0 + 1);
        const double span = y1 > y0 ? y1 - y0 : std::max(std::fabs(y1), 1e-9);
        double lo = y0 - 0.05 * span;
        if (y0 >= 0) // a positive quantity's axis does not dip below zero
            lo = std::max(0.0, lo);
        plot_->yAxis->setRange(lo, y1 + 0.08 * span);
    }
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void LivePlot::renderTo(QPainter& painter, const QSize& size) {
    clearLabels();
    detail::fitLegendColumns(*plot_, size.width(), 4);
    for (const QRectF& r : detail::renderPlot(*plot_, painter, size))
        addLabelRect(r);
    detail::fitLegendColumns(*plot_, width(), 4);
}

bool LivePlot::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        // The value of each line at the step under the cursor.
        auto* help = static_cast<QHelpEvent*>(e);
        const QPointF p = plot_->mapFrom(this, help->pos());
        QString text;
        if (plot_->axisRect()->rect().contains(p.toPoint())) {
            const double step = plot_->xAxis->pixelToCoord(p.x());
            for (const LiveLine& l : lines_) {
                const auto it = std::lower_bound(l.x.begin(), l.x.end(), step);
                if (it == l.x.end())
                    continue;
                const int i = int(it - l.x.begin());
                text += QString("%1, step %2: %3\n")
                            .arg(l.name)
                            .arg(l.x[i])
                            .arg(detail::formatValue(l.y[i], yKind_));
            }
        }
        detail::showToolTip(help, this, text.trimmed());
        return true;
    }
    if (e->type() == QEvent::PaletteChange) {
        restyle();
        refill();
    }
    return Chart::event(e);
}

} // namespace shardscope
