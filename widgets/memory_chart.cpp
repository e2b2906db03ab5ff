#include "memory_chart.h"

#include "chart_style.h"
#include "core/units.h"

#include <QHelpEvent>
#include <QResizeEvent>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

namespace shardscope {

namespace {

constexpr double kBarWidth = 0.6;

// Bars sit at keys 1..n so tick i labels bar i - 1.
double keyOf(std::size_t bar) {
    return static_cast<double>(bar + 1);
}

} // namespace

const std::array<QString, MemoryChart::kCategories>& MemoryChart::categoryNames() {
    static const std::array<QString, kCategories> names = {
        tr("Weights"),     tr("Gradients"),         tr("Optimizer state"),
        tr("Activations"), tr("Temporary buffers"), tr("Runtime overhead")};
    return names;
}

std::array<double, MemoryChart::kCategories> MemoryChart::categoryBytes(const MemoryBreakdown& m) {
    return {m.parameters, m.gradients, m.optimizer, m.activations, m.temporary, m.overhead};
}

MemoryChart::MemoryChart(QWidget* parent) : Chart(parent), plot_(new QCustomPlot(this)) {
    setTitle(tr("Memory per GPU"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(plot_);
    detail::setUpPlot(*plot_, false);
    detail::placeLegendBelow(*plot_, 3);
    setMinimumSize(320, 220);
    rebuild();
}

void MemoryChart::setBars(std::vector<MemoryBar> bars, double capacityBytes,
                          const QString& capacityLabel) {
    bars_ = std::move(bars);
    capacity_ = capacityBytes;
    capacityLabel_ = capacityLabel;
    rebuild();
}

void MemoryChart::setCategoryTooltips(const std::array<QString, kCategories>& tooltips) {
    tooltips_ = tooltips;
}

void MemoryChart::rebuild() {
    plot_->clearPlottables();
    plot_->clearItems();
    plot_->legend->clearItems();
    detail::stylePlot(*plot_, palette());

    QVector<double> keys;
    double top = 0;
    for (std::size_t i = 0; i < bars_.size(); ++i) {
        keys.push_back(keyOf(i));
        top = std::max({top, bars_[i].memory.total(), bars_[i].predicted});
    }
    // Megabytes for the small models a CPU run trains, gigabytes otherwise.
    unit_ = std::max(top, capacity_) >= GB ? GB : MB;

    const QColor separator = palette().color(QPalette::Base);
    std::array<QCPBars*, kCategories> stack{};
    for (int c = 0; c < kCategories; ++c) {
        auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
        bars->setName(categoryNames()[static_cast<std::size_t>(c)]);
        bars->setWidth(kBarWidth);
        bars->setStackingGap(0);
        bars->setBrush(detail::categoryColor(c));
        bars->setPen(QPen(separator, 1));
        QVector<double> values;
        for (const MemoryBar& bar : bars_)
            values.push_back(categoryBytes(bar.memory)[static_cast<std::size_t>(c)] / unit_);
        bars->setData(keys, values, true);
        if (c > 0)
            bars->moveAbove(stack[static_cast<std::size_t>(c - 1)]);
        stack[static_cast<std::size_t>(c)] = bars;
    }
    // Legend in the order the segments stack, bottom first (the legend reads left to right).
    for (int c = 0; c < kCategories; ++c)
        plot_->legend->addItem(
            new QCPPlottableLegendItem(plot_->legend, stack[static_cast<std::size_t>(c)]));

    const QColor fg = palette().color(QPalette::Text);
    bool anyPrediction = false;
    for (std::size_t i = 0; i < bars_.size(); ++i) {
        if (bars_[i].predicted <= 0)
            continue;
        auto* marker = new QCPItemLine(plot_);
        marker->start->setCoords(keyOf(i) - kBarWidth * 0.7, bars_[i].predicted / unit_);
        marker->end->setCoords(keyOf(i) + kBarWidth * 0.7, bars_[i].predicted / unit_);
        marker->setPen(QPen(fg, 2, Qt::DashLine));
        anyPrediction = true;
    }
    if (anyPrediction) { // a legend entry for the markers: an empty graph with their pen
        QCPGraph* legend = plot_->addGraph();
        legend->setName(tr("predicted"));
        legend->setPen(QPen(fg, 2, Qt::DashLine));
        legend->removeFromLegend();
        plot_->legend->addItem(new QCPPlottableLegendItem(plot_->legend, legend));
    }

    if (capacity_ > 0) {
        auto* line = new QCPItemStraightLine(plot_);
        line->point1->setCoords(0, capacity_ / unit_);
        line->point2->setCoords(1, capacity_ / unit_);
        line->setPen(QPen(fg, 1.5, Qt::DashLine));
        auto* label = new QCPItemText(plot_);
        label->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        label->position->setTypeY(QCPItemPosition::ptPlotCoords);
        label->position->setCoords(0.01, capacity_ / unit_);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        const QString value = detail::formatTick(capacity_, ValueKind::Bytes); // "80 GB"
        label->setText(capacityLabel_.isEmpty() ? value
                                                : capacityLabel_ + QStringLiteral(": ") + value);
        label->setColor(fg);
        label->setPadding(QMargins(2, 0, 2, 2));
    }

    fitTickLabels(width());
    plot_->xAxis->setSubTicks(false);
    plot_->xAxis->setTickLength(0, 4);
    plot_->xAxis->grid()->setVisible(false);
    plot_->xAxis->setRange(keyOf(0) - 0.6, keyOf(bars_.empty() ? 0 : bars_.size() - 1) + 0.6);
    plot_->yAxis->setLabel(unit_ == GB ? tr("GB per GPU") : tr("MB per GPU"));
    // Room above the capacity line for its label; a little air above the bars otherwise.
    const double yMax = std::max(top, capacity_) * (capacity_ > 0 ? 1.25 : 1.1) / unit_;
    plot_->yAxis->setRange(0, yMax > 0 ? yMax : 1.0);
    plot_->replot(QCustomPlot::rpQueuedRefresh);
}

QString MemoryChart::tooltipAt(const QPoint& pos) const {
    if (bars_.empty())
        return {};
    const QPointF p = plot_->mapFrom(this, pos);
    if (!plot_->axisRect()->rect().contains(p.toPoint()))
        return {};
    const double key = plot_->xAxis->pixelToCoord(p.x());
    const double gb = plot_->yAxis->pixelToCoord(p.y()) * unit_ / GB;
    const long nearest = std::lround(key) - 1;
    if (nearest < 0 || nearest >= static_cast<long>(bars_.size()) ||
        std::fabs(key - keyOf(static_cast<std::size_t>(nearest))) > kBarWidth / 2 || gb < 0)
        return {};
    const MemoryBar& bar = bars_[static_cast<std::size_t>(nearest)];
    const auto bytes = categoryBytes(bar.memory);
    double base = 0;
    for (std::size_t c = 0; c < bytes.size(); ++c) {
        const double height = bytes[c] / GB;
        if (height > 0 && gb >= base && gb < base + height) {
            QString text = bar.label + QLatin1Char('\n') + categoryNames()[c] +
                           QStringLiteral(": ") + detail::toQString(formatBytes(bytes[c])) +
                           QStringLiteral(" of ") +
                           detail::toQString(formatBytes(bar.memory.total()));
            if (!tooltips_[c].isEmpty())
                text += QLatin1Char('\n') + tooltips_[c];
            if (bar.predicted > 0) {
                double comparable = 0;
                QStringList covered;
                for (std::size_t k = 0; k < bytes.size(); ++k)
                    if (bar.predictedCovers[k]) {
                        comparable += bytes[k];
                        covered << categoryNames()[k].toLower();
                    }
                text += QStringLiteral("\npredicted ") +
                        detail::toQString(formatBytes(bar.predicted)) + QStringLiteral(" for ") +
                        covered.join(QStringLiteral(", ")) + QStringLiteral("; these measured ") +
                        QString::number((comparable / bar.predicted - 1) * 100, 'f', 1) +
                        QStringLiteral(" % from it");
            }
            return text;
        }
        base += height;
    }
    return {};
}

// A bar's whole label when it fits under the bar, else its last word ("stage 12" -> "12",
// with the axis named), else every k-th label: never two labels on top of each other.
void MemoryChart::fitTickLabels(int widthPixels) {
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    const QFontMetrics fm(plot_->xAxis->tickLabelFont());
    const double bars = double(std::max<std::size_t>(1, bars_.size()));
    const double perBar = std::max(1.0, (widthPixels - 70.0) / bars);
    int widest = 0, widestShort = 0;
    for (const MemoryBar& bar : bars_) {
        widest = std::max(widest, fm.horizontalAdvance(bar.label));
        widestShort = std::max(widestShort, fm.horizontalAdvance(bar.label.section(' ', -1)));
    }
    const bool whole = widest + 8 <= perBar;
    const int every = whole ? 1 : std::max(1, int(std::ceil((widestShort + 8) / perBar)));
    for (std::size_t i = 0; i < bars_.size(); ++i) {
        if (i % std::size_t(every) == 0)
            ticker->addTick(keyOf(i), whole ? bars_[i].label : bars_[i].label.section(' ', -1));
    }
    plot_->xAxis->setTicker(ticker);
    // Short labels name what they count on the axis ("stage").
    const QString first = bars_.empty() ? QString() : bars_.front().label;
    plot_->xAxis->setLabel(whole || !first.contains(' ') ? QString() : first.section(' ', 0, -2));
    detail::fitLegendColumns(*plot_, widthPixels, 3);
}

void MemoryChart::resizeEvent(QResizeEvent* event) {
    fitTickLabels(event->size().width());
    Chart::resizeEvent(event);
    // The plot has already redrawn for its new size (it is resized first): again, fitted.
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void MemoryChart::renderTo(QPainter& painter, const QSize& size) {
    clearLabels();
    fitTickLabels(size.width());
    for (const QRectF& r : detail::renderPlot(*plot_, painter, size))
        addLabelRect(r);
    fitTickLabels(width());
}

bool MemoryChart::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(e);
        detail::showToolTip(help, this, tooltipAt(help->pos()));
        return true;
    }
    if (e->type() == QEvent::PaletteChange)
        rebuild();
    return Chart::event(e);
}

} // namespace shardscope
