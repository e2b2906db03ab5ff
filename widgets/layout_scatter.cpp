#include "layout_scatter.h"

#include "chart_style.h"
#include "core/units.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPaintEngine>
#include <QPainter>
#include <QVBoxLayout>
#include <algorithm>

namespace shardscope {

namespace {

constexpr double kPickRadius = 6; // pixels
constexpr double kDot = 3.5;      // point diameter, pixels

QPixmap dotPixmap(const QColor& color) {
    QPixmap pixmap(4, 4);
    pixmap.fill(Qt::transparent);
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(Qt::NoPen);
    painter.setBrush(color);
    painter.drawEllipse(QRectF(0.25, 0.25, kDot, kDot));
    return pixmap;
}

QColor fitColor(const QPalette& palette) {
    return detail::isDark(palette) ? QColor(0x56, 0xB4, 0xE9) : QColor(0x00, 0x72, 0xB2);
}

QString describe(const ParallelConfig& c) {
    const QString zero =
        c.hybridShard()
            ? LayoutScatter::tr("ZeRO-%1 over groups of %2").arg(c.zero).arg(c.zeroShards())
            : LayoutScatter::tr("ZeRO-%1").arg(c.zero);
    return LayoutScatter::tr("dp %1 · tp %2 · pp %3 · cp %4, %5, microbatch %6")
        .arg(c.dp)
        .arg(c.tp)
        .arg(c.pp)
        .arg(c.cp)
        .arg(zero)
        .arg(c.microBatch);
}

} // namespace

LayoutScatter::LayoutScatter(QWidget* parent) : Chart(parent), plot_(new QCustomPlot(this)) {
    setTitle(tr("Layouts: memory against throughput"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(plot_);
    detail::setUpPlot(*plot_, true); // the best layouts sit top left: keep the legend off them
    plot_->xAxis->setLabel(tr("memory per GPU (GB)"));
    plot_->yAxis->setLabel(tr("tokens/s"));
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(
        new detail::FormatTicker([](double v) { return detail::toQString(formatCount(v)); })));
    plot_->yAxis->setNumberFormat(QStringLiteral("g"));
    setMinimumSize(320, 220);
    // Drag pans and the wheel zooms; a click (press and release in one place) picks a layout.
    plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    connect(plot_, &QCustomPlot::mousePress, this,
            [this](QMouseEvent* event) { pressPos_ = event->position().toPoint(); });
    connect(plot_, &QCustomPlot::mouseRelease, this, [this](QMouseEvent* event) {
        if (event->button() != Qt::LeftButton ||
            (event->position().toPoint() - pressPos_).manhattanLength() > 4)
            return;
        const int index = candidateAt(plot_->mapTo(this, event->position().toPoint()));
        if (index >= 0)
            emit candidateClicked(index);
    });
    rebuild();
}

void LayoutScatter::setCandidates(const std::vector<Candidate>& candidates,
                                  const std::vector<std::size_t>& front, double capacityBytes) {
    memory_.clear();
    throughput_.clear();
    fits_.clear();
    configs_.clear();
    memory_.reserve(candidates.size());
    throughput_.reserve(candidates.size());
    fits_.reserve(candidates.size());
    configs_.reserve(candidates.size());
    for (const Candidate& c : candidates) {
        memory_.push_back(c.memory / GB);
        throughput_.push_back(c.tokensPerSecond);
        fits_.push_back(c.fits);
        configs_.push_back(c.config);
    }
    front_.clear();
    for (std::size_t i : front)
        if (i < candidates.size())
            front_.push_back(i);
    capacity_ = capacityBytes;
    if (highlighted_ >= static_cast<int>(candidates.size()))
        highlighted_ = -1;
    rebuild();
}

void LayoutScatter::setHighlighted(int index) {
    highlighted_ = index >= 0 && index < static_cast<int>(memory_.size()) ? index : -1;
    updateHighlight();
    plot_->replot(QCustomPlot::rpQueuedRefresh);
}

void LayoutScatter::rebuild() {
    plot_->clearGraphs();
    plot_->clearItems();
    plot_->legend->clearItems();
    highlight_ = nullptr;
    detail::stylePlot(*plot_, palette());
    const QPalette& pal = palette();
    const QColor fg = pal.color(QPalette::Text), base = pal.color(QPalette::Base);

    // One graph per kind of point, never one object per point: 130k points stay cheap.
    QVector<double> fx, fy, nx, ny;
    double maxX = capacity_ / GB, maxY = 0;
    for (std::size_t i = 0; i < memory_.size(); ++i) {
        (fits_[i] ? fx : nx).push_back(memory_[i]);
        (fits_[i] ? fy : ny).push_back(throughput_[i]);
        // The interesting region is what fits: layouts far over the capacity would squeeze it
        // into a sliver, so the x range stops at twice the capacity (drag or zoom to see more).
        if (fits_[i] || capacity_ <= 0 || memory_[i] <= 2 * capacity_ / GB)
            maxX = std::max(maxX, memory_[i]);
        maxY = std::max(maxY, throughput_[i]);
    }
    const auto addPoints = [&](const QVector<double>& x, const QVector<double>& y,
                               const QString& name) {
        QCPGraph* graph = plot_->addGraph();
        graph->setName(name);
        graph->setLineStyle(QCPGraph::lsNone);
        graph->setData(x, y);
        graph->addToLegend();
    };
    addPoints(nx, ny, tr("does not fit")); // graph 0
    addPoints(fx, fy, tr("fits"));         // graph 1
    setPointStyle(false);

    std::vector<std::size_t> front = front_;
    std::sort(front.begin(), front.end(),
              [this](std::size_t a, std::size_t b) { return memory_[a] < memory_[b]; });
    QVector<double> px, py;
    for (std::size_t i : front) {
        px.push_back(memory_[i]);
        py.push_back(throughput_[i]);
    }
    const QColor frontColor(0xD5, 0x5E, 0x00);
    QCPGraph* pareto = plot_->addGraph();
    pareto->setName(tr("Pareto front"));
    pareto->setPen(QPen(frontColor, 2));
    pareto->setScatterStyle(
        QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(frontColor, 1.5), QBrush(base), 7));
    pareto->setData(px, py, true);
    if (!front.empty())
        pareto->addToLegend();

    highlight_ = plot_->addGraph();
    highlight_->setLineStyle(QCPGraph::lsNone);
    highlight_->setScatterStyle(
        QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(fg, 2.5), Qt::NoBrush, 16));
    updateHighlight();

    if (capacity_ > 0) {
        auto* line = new QCPItemStraightLine(plot_);
        line->point1->setCoords(capacity_ / GB, 0);
        line->point2->setCoords(capacity_ / GB, 1);
        line->setPen(QPen(fg, 1.5, Qt::DashLine));
        auto* label = new QCPItemText(plot_);
        label->position->setTypeX(QCPItemPosition::ptPlotCoords);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(capacity_ / GB, 0.0);
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
        label->setText(tr("capacity %1").arg(detail::formatTick(capacity_, ValueKind::Bytes)));
        label->setColor(fg);
        label->setPadding(QMargins(2, 2, 4, 2));
    }

    plot_->legend->setVisible(!memory_.empty());
    plot_->xAxis->setRange(0, maxX > 0 ? maxX * 1.05 : 1.0);
    plot_->yAxis->setRange(0, maxY > 0 ? maxY * 1.08 : 1.0);
    plot_->replot(QCustomPlot::rpQueuedRefresh);
}

void LayoutScatter::setPointStyle(bool vector) {
    const QPalette& pal = palette();
    const QColor colors[2] = {
        detail::mix(pal.color(QPalette::Base), pal.color(QPalette::Text), 0.35), fitColor(pal)};
    for (int g = 0; g < 2; ++g) {
        // On screen a pre-rendered dot is ~20x faster than a path per point for 130k points;
        // vector exports want real discs.
        plot_->graph(g)->setScatterStyle(
            vector ? QCPScatterStyle(QCPScatterStyle::ssDisc, colors[g], colors[g], kDot)
                   : QCPScatterStyle(dotPixmap(colors[g])));
    }
}

void LayoutScatter::updateHighlight() {
    if (highlight_ == nullptr)
        return;
    if (highlighted_ >= 0) {
        const auto i = static_cast<std::size_t>(highlighted_);
        highlight_->setData(QVector<double>{memory_[i]}, QVector<double>{throughput_[i]}, true);
    } else {
        highlight_->data()->clear();
    }
}

int LayoutScatter::candidateAt(const QPoint& pos) const {
    const QPointF p = plot_->mapFrom(this, pos);
    if (!plot_->axisRect()->rect().adjusted(-3, -3, 3, 3).contains(p.toPoint()))
        return -1;
    int best = -1;
    double bestDistance = kPickRadius * kPickRadius;
    for (std::size_t i = 0; i < memory_.size(); ++i) {
        const double dx = plot_->xAxis->coordToPixel(memory_[i]) - p.x();
        const double dy = plot_->yAxis->coordToPixel(throughput_[i]) - p.y();
        const double d = dx * dx + dy * dy;
        if (d <= bestDistance) {
            bestDistance = d;
            best = static_cast<int>(i);
        }
    }
    return best;
}

void LayoutScatter::renderTo(QPainter& painter, const QSize& size) {
    const QPaintEngine* engine = painter.paintEngine();
    const bool vector = engine == nullptr || engine->type() != QPaintEngine::Raster;
    if (vector)
        setPointStyle(true);
    clearLabels();
    for (const QRectF& r : detail::renderPlot(*plot_, painter, size, false))
        addLabelRect(r);
    if (vector)
        setPointStyle(false);
    plot_->replot(QCustomPlot::rpQueuedRefresh);
}

bool LayoutScatter::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(e);
        const int index = candidateAt(help->pos());
        QString text;
        if (index >= 0) {
            const auto i = static_cast<std::size_t>(index);
            text = describe(configs_[i]) + QLatin1Char('\n') +
                   tr("%1 per GPU, %2 tokens/s%3")
                       .arg(detail::toQString(formatBytes(memory_[i] * GB)),
                            detail::toQString(formatCount(throughput_[i])),
                            fits_[i] ? QString() : tr(", does not fit"));
        }
        detail::showToolTip(help, this, text);
        return true;
    }
    if (e->type() == QEvent::PaletteChange)
        rebuild();
    return Chart::event(e);
}

} // namespace shardscope
