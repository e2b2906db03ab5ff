#include "cluster_map.h"

#include "chart_style.h"
#include "plan/layout.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <algorithm>
#include <cmath>

namespace shardscope {

namespace {

constexpr int kMargin = 8;
constexpr double kPad = 0.3;      // inside a node box around its cells, in cells
constexpr double kGap = 0.6;      // between node boxes, in cells
constexpr double kMaxCell = 44;   // small clusters should not get giant cells
constexpr double kLabelCell = 26; // cells this large carry their rank

// Columns of GPU cells inside a node box: close to 2:1 with few empty cells (8 -> 4 x 2).
int innerColumns(int gpus) {
    int best = 1;
    double bestCost = 1e300;
    for (int c = 1; c <= gpus; ++c) {
        const int rows = (gpus + c - 1) / c;
        const double cost =
            std::fabs(static_cast<double>(c) / rows - 2.0) + 0.5 * (c * rows - gpus);
        if (cost < bestCost) {
            bestCost = cost;
            best = c;
        }
    }
    return best;
}

QString rangeText(int count) {
    return count <= 1 ? QStringLiteral("0") : QStringLiteral("0..%1").arg(count - 1);
}

} // namespace

QString toDisplayString(ColorBy c) {
    switch (c) {
    case ColorBy::TpGroup:
        return ClusterMap::tr("TP group");
    case ColorBy::PpStage:
        return ClusterMap::tr("PP stage");
    case ColorBy::DpReplica:
        return ClusterMap::tr("DP replica");
    case ColorBy::CpRank:
        return ClusterMap::tr("CP rank");
    }
    return {};
}

struct ClusterMap::Geometry {
    QRect banner; // empty when there is no warning
    QRect legend;
    QPointF origin; // top-left of the first node box
    int gpusPerNode = 1;
    int nodes = 0;
    int nodeCols = 1;
    int cellCols = 1, cellRows = 1;
    double cell = 0; // pixels per GPU cell
    double strideX = 0, strideY = 0;

    QRectF nodeRect(int node) const {
        const int col = node % nodeCols, row = node / nodeCols;
        return {origin.x() + col * strideX, origin.y() + row * strideY,
                (cellCols + 2 * kPad) * cell, (cellRows + 2 * kPad) * cell};
    }
    QRect cellRect(int node, int slot) const {
        const QRectF box = nodeRect(node);
        const int cx = slot % cellCols, cy = slot / cellCols;
        const double x = box.left() + kPad * cell + cx * cell;
        const double y = box.top() + kPad * cell + cy * cell;
        // A one-pixel gutter separates cells once they are big enough to afford it.
        const int gutter = cell >= 6 ? 1 : 0;
        const int x0 = static_cast<int>(std::lround(x)), y0 = static_cast<int>(std::lround(y));
        const int x1 = static_cast<int>(std::lround(x + cell));
        const int y1 = static_cast<int>(std::lround(y + cell));
        return {x0, y0, std::max(1, x1 - x0 - gutter), std::max(1, y1 - y0 - gutter)};
    }
};

ClusterMap::ClusterMap(QWidget* parent) : Chart(parent) {
    setTitle(tr("Cluster map"));
    setMouseTracking(true);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
    cluster_.nodes = 1;
    cluster_.gpusPerNode = 8;
    config_.dp = 8;
}

void ClusterMap::setLayout(const ClusterSpec& cluster, const ParallelConfig& config) {
    // Most control changes (batch, precision, recompute) leave the placement as it was: keep the
    // cached picture then, since redrawing 16k GPUs is the map's only real cost.
    const bool same = cluster.gpusPerNode == cluster_.gpusPerNode &&
                      cluster.nodes == cluster_.nodes && config.dp == config_.dp &&
                      config.tp == config_.tp && config.pp == config_.pp && config.cp == config_.cp;
    if (same)
        return;
    cluster_ = cluster;
    config_ = config;
    hovered_ = -1;
    cacheDirty_ = true;
    update();
}

void ClusterMap::setColorBy(ColorBy c) {
    colorBy_ = c;
    cacheDirty_ = true;
    update();
}

int ClusterMap::gpuCount() const {
    return std::max(0, cluster_.worldSize());
}

ClusterMap::Geometry ClusterMap::geometryFor(const QSize& size) const {
    Geometry g;
    g.gpusPerNode = std::max(1, cluster_.gpusPerNode);
    g.nodes = std::max(0, cluster_.nodes);
    const QFontMetrics fm = fontMetrics();
    const int width = std::max(1, size.width() - 2 * kMargin);

    int top = kMargin;
    const QString warn = warning();
    if (!warn.isEmpty()) {
        const QRect text = fm.boundingRect(QRect(0, 0, width - 16, 100000), Qt::TextWordWrap, warn);
        g.banner = QRect(kMargin, top, width, text.height() + 12);
        top = g.banner.bottom() + 1 + kMargin;
    }
    const int legendHeight = fm.height() + 6;
    g.legend = QRect(kMargin, size.height() - kMargin - legendHeight, width, legendHeight);
    const QRectF area(kMargin, top, width, std::max(1, g.legend.top() - 4 - top));

    g.cellCols = innerColumns(g.gpusPerNode);
    g.cellRows = (g.gpusPerNode + g.cellCols - 1) / g.cellCols;
    if (g.nodes == 0)
        return g;
    // Try every number of node columns and keep the one giving the largest cells.
    const double unitW = g.cellCols + 2 * kPad, unitH = g.cellRows + 2 * kPad;
    double best = 0;
    for (int cols = 1; cols <= g.nodes; ++cols) {
        const int rows = (g.nodes + cols - 1) / cols;
        const double s = std::min(area.width() / (cols * unitW + (cols - 1) * kGap),
                                  area.height() / (rows * unitH + (rows - 1) * kGap));
        if (s > best) {
            best = s;
            g.nodeCols = cols;
        }
    }
    g.cell = std::min(best, kMaxCell);
    g.strideX = (unitW + kGap) * g.cell;
    g.strideY = (unitH + kGap) * g.cell;
    const int nodeRows = (g.nodes + g.nodeCols - 1) / g.nodeCols;
    const double usedW = g.nodeCols * g.strideX - kGap * g.cell;
    const double usedH = nodeRows * g.strideY - kGap * g.cell;
    g.origin = QPointF(area.left() + std::max(0.0, (area.width() - usedW) / 2),
                       area.top() + std::max(0.0, (area.height() - usedH) / 2));
    return g;
}

int ClusterMap::gpuAt(const QPoint& pos) const {
    const Geometry g = geometryFor(size());
    if (g.nodes == 0 || g.cell <= 0)
        return -1;
    const int col = static_cast<int>(std::floor((pos.x() - g.origin.x()) / g.strideX));
    const int row = static_cast<int>(std::floor((pos.y() - g.origin.y()) / g.strideY));
    if (col < 0 || col >= g.nodeCols || row < 0)
        return -1;
    const int node = row * g.nodeCols + col;
    if (node >= g.nodes)
        return -1;
    const QRectF box = g.nodeRect(node);
    const int cx = static_cast<int>(std::floor((pos.x() - box.left()) / g.cell - kPad));
    const int cy = static_cast<int>(std::floor((pos.y() - box.top()) / g.cell - kPad));
    if (cx < 0 || cx >= g.cellCols || cy < 0 || cy >= g.cellRows)
        return -1;
    const int slot = cy * g.cellCols + cx;
    if (slot >= g.gpusPerNode)
        return -1;
    // The drawn rectangle is the truth: gutters between cells belong to no GPU.
    if (!g.cellRect(node, slot).contains(pos))
        return -1;
    return node * g.gpusPerNode + slot;
}

QString ClusterMap::describeGpu(int rank) const {
    if (rank < 0 || rank >= gpuCount())
        return {};
    const RankCoordinate c = rankCoordinate(config_, rank, cluster_.gpusPerNode);
    const int slot = rank - c.node * cluster_.gpusPerNode;
    const QString where = tr("GPU %1 (node %2, slot %3)").arg(rank).arg(c.node).arg(slot);
    if (rank >= config_.worldSize())
        return where + tr(": not used by the layout");
    return where + tr(": dp %1, tp %2, pp %3, cp %4").arg(c.dp).arg(c.tp).arg(c.pp).arg(c.cp);
}

namespace {

// The index a rank is coloured by and how many such indices there are.
int colorKey(ColorBy by, const RankCoordinate& c) {
    switch (by) {
    case ColorBy::TpGroup:
        return c.tpGroup;
    case ColorBy::PpStage:
        return c.pp;
    case ColorBy::DpReplica:
        return c.dp;
    case ColorBy::CpRank:
        return c.cp;
    }
    return 0;
}

// Every axis takes the qualitative palette: 16 colours that stay apart (a hue ramp over 16
// pipeline stages made neighbours indistinguishable), then the same colours hatched.
QColor keyColor(int key) {
    return detail::categoryColor(key);
}

// How many distinct indices the colouring has.
int keyCount(ColorBy by, const ParallelConfig& config, int tpGroups) {
    switch (by) {
    case ColorBy::TpGroup:
        return tpGroups;
    case ColorBy::PpStage:
        return std::max(1, config.pp);
    case ColorBy::DpReplica:
        return std::max(1, config.dp);
    case ColorBy::CpRank:
        return std::max(1, config.cp);
    }
    return 1;
}

int tpGroupCount(const ParallelConfig& config, int gpusPerNode) {
    const int world = config.worldSize();
    return world <= 0 ? 1 : rankCoordinate(config, world - 1, gpusPerNode).tpGroup + 1;
}

} // namespace

QColor ClusterMap::colorOf(int rank) const {
    if (rank < 0 || rank >= gpuCount())
        return {};
    if (rank >= config_.worldSize())
        return detail::mix(palette().color(QPalette::Base), palette().color(QPalette::Text), 0.25);
    const int gpn = std::max(1, cluster_.gpusPerNode);
    return keyColor(colorKey(colorBy_, rankCoordinate(config_, rank, gpn)));
}

Qt::BrushStyle ClusterMap::hatchOf(int rank) const {
    if (rank < 0 || rank >= std::min(gpuCount(), config_.worldSize()))
        return Qt::NoBrush;
    const int gpn = std::max(1, cluster_.gpusPerNode);
    return detail::categoryHatch(colorKey(colorBy_, rankCoordinate(config_, rank, gpn)));
}

bool ClusterMap::tpCrossesNodes() const {
    return shardscope::tpCrossesNodes(config_, std::max(1, cluster_.gpusPerNode));
}

QString ClusterMap::warning() const {
    QStringList parts;
    const int layoutWorld = config_.worldSize(), clusterWorld = gpuCount();
    if (layoutWorld < clusterWorld)
        parts << tr("The layout uses %1 of the cluster's %2 GPUs: ranks %1..%3 are idle (grey).")
                     .arg(layoutWorld)
                     .arg(clusterWorld)
                     .arg(clusterWorld - 1);
    else if (layoutWorld > clusterWorld)
        parts << tr("The layout needs %1 GPUs but the cluster has %2: ranks %2..%3 are not shown.")
                     .arg(layoutWorld)
                     .arg(clusterWorld)
                     .arg(layoutWorld - 1);
    if (tpCrossesNodes()) {
        const int gpn = std::max(1, cluster_.gpusPerNode), tp = std::max(1, config_.tp);
        // The widest span any TP group of this layout actually has.
        int span = 1;
        for (int first = 0; first + tp <= layoutWorld; first += tp)
            span = std::max(span, rankCoordinate(config_, first + tp - 1, gpn).node -
                                      rankCoordinate(config_, first, gpn).node + 1);
        if (tp > gpn)
            parts << tr("TP group of %1 spans %2 nodes: tensor-parallel traffic goes over the "
                        "network.")
                         .arg(tp)
                         .arg(span);
        else
            parts << tr("TP groups of %1 do not tile the %2 GPUs of a node: %3 tensor-parallel "
                        "traffic goes over the network.")
                         .arg(tp)
                         .arg(gpn)
                         .arg(span > 1 ? tr("some span %1 nodes and their").arg(span)
                                       : tr("a group that spans nodes sends its"));
    }
    return parts.join(QLatin1Char('\n'));
}

QSize ClusterMap::sizeHint() const {
    return {640, 400};
}

void ClusterMap::renderTo(QPainter& painter, const QSize& size) {
    const Geometry g = geometryFor(size);
    drawBase(painter, size, g);
    drawHover(painter, g);
}

void ClusterMap::drawBase(QPainter& painter, const QSize& size, const Geometry& g) {
    clearLabels();
    const QPalette& pal = palette();
    const QColor base = pal.color(QPalette::Base), fg = pal.color(QPalette::Text);
    painter.save();
    painter.setRenderHint(QPainter::Antialiasing, false);
    painter.setFont(font());
    painter.fillRect(QRect(QPoint(0, 0), size), base);

    const QString warn = warning();
    if (!g.banner.isEmpty()) {
        const QColor amber(0xE6, 0x9F, 0x00);
        painter.fillRect(g.banner, detail::mix(base, amber, 0.25));
        painter.setPen(amber);
        painter.drawRect(g.banner.adjusted(0, 0, -1, -1));
        painter.setPen(fg);
        drawLabel(painter, g.banner.adjusted(8, 6, -8, -6), Qt::TextWordWrap | Qt::AlignVCenter,
                  warn);
    }

    // Per-cell work is one fillRect with a prebuilt brush (cheaper than a QColor, which becomes a
    // brush on every call): 16k GPUs must draw in a few ms.
    const int gpn = g.gpusPerNode, gpus = gpuCount(), layoutWorld = config_.worldSize();
    const int tpGroups = tpGroupCount(config_, gpn);
    const int count = keyCount(colorBy_, config_, tpGroups);
    // One brush per colour and one hatch per round of 16 groups.
    std::vector<QBrush> colors, hatches;
    const int distinct = std::min(count, 3 * detail::kCategoryColorCount);
    colors.reserve(static_cast<std::size_t>(distinct));
    for (int key = 0; key < distinct; ++key) {
        colors.emplace_back(keyColor(key));
        QColor line = detail::textOn(keyColor(key));
        line.setAlpha(150);
        hatches.emplace_back(line, detail::categoryHatch(key));
    }
    const QColor nodeFill = detail::mix(base, fg, 0.08);
    const QBrush idle(detail::mix(base, fg, 0.25));
    const bool labels = g.cell >= kLabelCell;
    QFont small = font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.8));
    if (labels)
        painter.setFont(small);
    for (int node = 0; node < g.nodes; ++node)
        painter.fillRect(g.nodeRect(node).toAlignedRect(), nodeFill);
    for (int rank = 0; rank < gpus; ++rank) {
        const QRect r = g.cellRect(rank / gpn, rank % gpn);
        const std::size_t key =
            rank < layoutWorld
                ? std::size_t(colorKey(colorBy_, rankCoordinate(config_, rank, gpn)) % distinct)
                : 0;
        const QBrush& brush = rank < layoutWorld ? colors[key] : idle;
        painter.fillRect(r, brush);
        if (rank < layoutWorld && hatches[key].style() != Qt::NoBrush)
            painter.fillRect(r, hatches[key]);
        if (labels) {
            painter.setPen(detail::textOn(brush.color()));
            painter.drawText(r, Qt::AlignCenter, QString::number(rank));
        }
    }

    // Legend line: a few swatches, then what the colours mean.
    painter.setFont(font());
    const int swatch = std::max(8, g.legend.height() - 8);
    int x = g.legend.left();
    const int shown = std::min(count, detail::kCategoryColorCount);
    for (int i = 0; i < shown; ++i) {
        painter.fillRect(QRect(x, g.legend.center().y() - swatch / 2, swatch, swatch), keyColor(i));
        x += swatch + 2;
    }
    painter.setPen(fg);
    const QString legend =
        tr("coloured by %1: %2   ·   %3 nodes × %4 GPUs   ·   dp %5, tp %6, pp %7, cp %8")
            .arg(toDisplayString(colorBy_), rangeText(count))
            .arg(g.nodes)
            .arg(gpn)
            .arg(config_.dp)
            .arg(config_.tp)
            .arg(config_.pp)
            .arg(config_.cp);
    drawLabel(painter, g.legend.adjusted(x - g.legend.left() + 6, 0, 0, 0),
              Qt::AlignLeft | Qt::AlignVCenter, legend);
    painter.restore();
}

void ClusterMap::drawHover(QPainter& painter, const Geometry& g) const {
    const int gpn = g.gpusPerNode, used = std::min(gpuCount(), config_.worldSize());
    if (hovered_ < 0 || hovered_ >= used)
        return;
    painter.save();
    painter.setRenderHint(QPainter::Antialiasing, false);
    // Outline the hovered GPU's whole group (those sharing its colour).
    const int hoveredKey = colorKey(colorBy_, rankCoordinate(config_, hovered_, gpn));
    painter.setPen(QPen(palette().color(QPalette::Text), 1));
    painter.setBrush(Qt::NoBrush);
    for (int rank = 0; rank < used; ++rank) {
        if (colorKey(colorBy_, rankCoordinate(config_, rank, gpn)) == hoveredKey)
            painter.drawRect(g.cellRect(rank / gpn, rank % gpn).adjusted(-1, -1, 0, 0));
    }
    painter.setPen(QPen(palette().color(QPalette::Highlight), 2));
    painter.drawRect(g.cellRect(hovered_ / gpn, hovered_ % gpn).adjusted(-1, -1, 0, 0));
    painter.restore();
}

void ClusterMap::paintEvent(QPaintEvent*) {
    // The map itself only changes with the layout, size or palette; hovering redraws just the
    // outlines over a cached image of it.
    const qreal dpr = devicePixelRatioF();
    const QSize pixels = (QSizeF(size()) * dpr).toSize();
    if (cache_.size() != pixels || cache_.devicePixelRatio() != dpr || cacheDirty_) {
        cache_ = QImage(pixels, QImage::Format_ARGB32_Premultiplied);
        cache_.setDevicePixelRatio(dpr);
        QPainter cachePainter(&cache_);
        drawBase(cachePainter, size(), geometryFor(size()));
        cacheDirty_ = false;
    }
    QPainter painter(this);
    painter.drawImage(QPointF(0, 0), cache_);
    drawHover(painter, geometryFor(size()));
}

void ClusterMap::mouseMoveEvent(QMouseEvent* event) {
    const int rank = gpuAt(event->position().toPoint());
    if (rank != hovered_) {
        hovered_ = rank;
        update();
        emit gpuHovered(rank);
    }
    Chart::mouseMoveEvent(event);
}

bool ClusterMap::event(QEvent* e) {
    switch (e->type()) {
    case QEvent::ToolTip: {
        auto* help = static_cast<QHelpEvent*>(e);
        detail::showToolTip(help, this, describeGpu(gpuAt(help->pos())));
        return true;
    }
    case QEvent::Leave:
        if (hovered_ != -1) {
            hovered_ = -1;
            update();
            emit gpuHovered(-1);
        }
        break;
    case QEvent::PaletteChange:
    case QEvent::FontChange:
        cacheDirty_ = true;
        update();
        break;
    default:
        break;
    }
    return Chart::event(e);
}

} // namespace shardscope
