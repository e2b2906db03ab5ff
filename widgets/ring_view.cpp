#include "ring_view.h"

#include <QFontMetrics>
#include <QPainter>
#include <QPainterPath>
#include <QtMath>
#include <algorithm>
#include <bit>

namespace shardscope {

RingView::RingView(QWidget* parent) : Chart(parent) {
    setMinimumSize(300, 300);
}

QSize RingView::sizeHint() const {
    return {520, 520};
}

void RingView::setPlan(const CollectivePlan& plan, const QString& caption) {
    plan_ = plan;
    sources_ = chunkSourcesByStep(plan);
    caption_ = caption;
    rankLabels_.clear();
    for (int r = 0; r < plan.spec.ranks; ++r)
        rankLabels_.push_back(QStringLiteral("GPU %1").arg(r));
    time_ = std::min(time_, double(stepCount()));
    update();
}

void RingView::setStatus(const QString& status) {
    status_ = status;
    update();
}

void RingView::setTime(double steps) {
    time_ = std::clamp(steps, 0.0, double(stepCount()));
    update();
}

int RingView::currentStep() const {
    return std::min(stepCount(), int(std::floor(time_)));
}

QString RingView::phase() const {
    const int s = currentStep();
    return s < stepCount() ? QString::fromStdString(plan_.steps[std::size_t(s)].phase)
                           : QStringLiteral("done");
}

double RingView::fillOf(int rank, int chunk) const {
    if (sources_.empty())
        return 0;
    const std::uint64_t held =
        sources_[std::size_t(currentStep())][std::size_t(rank)][std::size_t(chunk)];
    return double(std::popcount(held)) / plan_.spec.ranks;
}

QColor RingView::chunkColor(int chunk) const {
    // Golden-ratio steps around the hue circle keep neighbouring chunks apart.
    const float hue = float(std::fmod(0.6 + 0.61803 * chunk, 1.0));
    return QColor::fromHsvF(hue, 0.65f, 0.85f);
}

void RingView::renderTo(QPainter& p, const QSize& size) {
    clearLabels();
    arrows_.clear();
    const QPalette& pal = palette();
    p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
    p.setRenderHint(QPainter::Antialiasing);
    p.setPen(pal.color(QPalette::Text));
    // Caption and status stay inside the view, shortened with an ellipsis when it is narrow.
    const double textW = size.width() - 16;
    const QFontMetrics metrics(p.font());
    drawLabel(p, QRectF(8, 4, textW, 20), Qt::AlignLeft | Qt::AlignVCenter,
              metrics.elidedText(caption_, Qt::ElideRight, int(textW)));
    if (!status_.isEmpty())
        drawLabel(p, QRectF(8, 24, textW, 20), Qt::AlignLeft | Qt::AlignVCenter,
                  metrics.elidedText(status_, Qt::ElideRight, int(textW)));
    const int n = plan_.spec.ranks;
    if (n == 0)
        return;

    // GPUs on an ellipse filling the view (a wide view spreads them sideways), each a box with
    // its name on top and its chunks below. Arrows start outside the boxes, so they never run
    // under a name.
    const double top = 48;
    const QPointF centre(size.width() / 2.0, top + (size.height() - top) / 2.0);
    const double outerX = std::max(40.0, size.width() / 2.0 - 4);
    const double outerY = std::max(40.0, (size.height() - top) / 2.0 - 4);
    const double nameH = metrics.height() + 2;
    const double nameW = metrics.horizontalAdvance(rankLabels_.back()) + 10;
    const int chunks = plan_.chunks;
    // Chunks in a grid about twice as wide as tall (a divisor of their count, so rows are full),
    // or in one row when room is short.
    int gridCols = 1;
    for (int c = 1; c <= chunks; ++c) {
        if (chunks % c == 0 &&
            std::abs(c - std::sqrt(2.0 * chunks)) < std::abs(gridCols - std::sqrt(2.0 * chunks)))
            gridCols = c;
    }
    int cols = gridCols, rows = 1;
    double cellW = 6, cellH = 8, boxW = 0, boxH = 0;
    std::vector<QPointF> at(static_cast<std::size_t>(n));
    const auto fits = [&](int columns, double cell, double gap) {
        cols = columns;
        rows = chunks / cols;
        cellW = std::min(cell, 200.0 / cols);
        cellH = std::max(8.0, cellW * 0.8);
        boxW = std::max(cols * cellW + 6, nameW);
        boxH = nameH + rows * cellH + 6;
        const double ry = std::max(10.0, outerY - boxH / 2);
        const double rx = std::clamp(outerX - boxW / 2, std::min(10.0, ry), 1.6 * ry);
        for (int i = 0; i < n; ++i) {
            const double angle = -M_PI / 2 + 2 * M_PI * i / n;
            at[std::size_t(i)] = centre + QPointF(rx * std::cos(angle), ry * std::sin(angle));
        }
        const QRectF box(QPointF(-boxW / 2, -boxH / 2), QSizeF(boxW, boxH));
        const QRectF apart = box.adjusted(-gap, -gap, gap, gap);
        for (int i = 0; i < n; ++i) {
            if (apart.translated(at[std::size_t(i)])
                    .intersects(box.translated(at[std::size_t((i + 1) % n)])))
                return false;
        }
        return true;
    };
    // Readable cells first, with a long arrow between neighbours, then a short one; then cells
    // too small to number, in a grid or in one row.
    bool clear = false;
    for (double cell = 36; cell >= 14 && !clear; cell -= 1)
        clear = fits(gridCols, cell, 40) || fits(gridCols, cell, 24);
    for (double cell = 13; cell >= 6 && !clear; cell -= 1)
        clear = fits(gridCols, cell, 20) || fits(gridCols, cell, 12);
    for (double cell = 12; cell >= 3 && !clear; cell -= 1)
        clear = fits(chunks, cell, 20) || fits(chunks, cell, 12);
    // Where a ray from a box's centre along the unit vector u leaves the box.
    const auto exitAt = [&](const QPointF& u) {
        const double tx = std::abs(u.x()) > 1e-9 ? boxW / 2 / std::abs(u.x()) : 1e9;
        const double ty = std::abs(u.y()) > 1e-9 ? boxH / 2 / std::abs(u.y()) : 1e9;
        return std::min(tx, ty);
    };

    QColor empty = pal.color(QPalette::Text);
    empty.setAlpha(30);
    QFont small = p.font();
    small.setPointSizeF(std::max(7.0, std::min(small.pointSizeF(), cellH * 0.45)));
    const QFont labelFont = p.font();
    for (int r = 0; r < n; ++r) {
        const QPointF c = at[std::size_t(r)];
        const QRectF box(c - QPointF(boxW / 2, boxH / 2), QSizeF(boxW, boxH));
        p.setPen(pal.color(QPalette::Text));
        p.setBrush(Qt::NoBrush);
        p.drawRoundedRect(box, 4, 4);
        p.setFont(labelFont);
        drawLabel(p, QRectF(box.left(), box.top() + 1, boxW, nameH), Qt::AlignCenter,
                  rankLabels_[std::size_t(r)]);
        p.setFont(small);
        const double gridLeft = box.center().x() - cols * cellW / 2;
        for (int k = 0; k < chunks; ++k) {
            const QRectF cell(gridLeft + (k % cols) * cellW,
                              box.top() + nameH + double(k / cols) * cellH, cellW - 1, cellH - 1);
            p.fillRect(cell, empty);
            const double fill = fillOf(r, k);
            if (fill > 0) {
                QRectF part = cell;
                part.setTop(cell.bottom() - cell.height() * fill);
                p.fillRect(part, chunkColor(k));
            }
            if (chunks > 1 && cellW >= 14) {
                p.setPen(fill >= 0.5 ? QColor(Qt::black) : pal.color(QPalette::Text));
                p.drawText(cell, Qt::AlignCenter, QString::number(k));
            }
        }
    }
    p.setFont(labelFont);

    // Arrows for the step under way, with a dot travelling along each. Neighbours on the ring
    // get a straight arrow, a little to its right so that two GPUs swapping chunks show two;
    // others a curve bowed towards the centre, clear of the boxes in between.
    const int s = currentStep();
    if (s >= stepCount())
        return;
    const double frac = time_ - s;
    const auto unit = [](const QPointF& v) {
        const double len = std::hypot(v.x(), v.y());
        return len > 1e-9 ? v / len : QPointF(0, 0);
    };
    for (const ChunkTransfer& t : plan_.steps[std::size_t(s)].transfers) {
        const QPointF a = at[std::size_t(t.from)], b = at[std::size_t(t.to)];
        if (std::hypot(b.x() - a.x(), b.y() - a.y()) < 1)
            continue;
        const int apart = std::abs(t.from - t.to);
        const bool neighbours = apart == 1 || apart == n - 1;
        const QPointF middle = (a + b) / 2;
        const QPointF control = neighbours ? middle : centre + (middle - centre) * 0.2;
        const QPointF out = unit(control - a), in = unit(b - control);
        const QPointF shift = neighbours ? QPointF(-out.y(), out.x()) * 4 : QPointF(0, 0);
        const QPointF from = a + out * (exitAt(out) + 3) + shift;
        const QPointF to = b - in * (exitAt(in) + 3) + shift;
        if (QPointF::dotProduct(to - from, unit(b - a)) < 4)
            continue; // boxes touching: no room for an arrow
        const QPointF bend = neighbours ? (from + to) / 2 : control;
        const auto along = [&](double x) { // the quadratic curve from `from` to `to`
            return (1 - x) * (1 - x) * from + 2 * (1 - x) * x * bend + x * x * to;
        };
        QPolygonF path;
        for (int k = 0; k <= 24; ++k)
            path << along(k / 24.0);
        arrows_.push_back(path);
        QPen pen(chunkColor(t.chunk));
        pen.setWidthF(2.5);
        p.setPen(pen);
        p.setBrush(Qt::NoBrush);
        p.drawPolyline(path);
        const QPointF tip = unit(to - bend), side(-tip.y(), tip.x());
        QPainterPath head;
        head.moveTo(to);
        head.lineTo(to - tip * 10 + side * 5);
        head.lineTo(to - tip * 10 - side * 5);
        head.closeSubpath();
        p.fillPath(head, chunkColor(t.chunk));
        p.setBrush(chunkColor(t.chunk));
        p.drawEllipse(along(frac), 5, 5);
    }
}

void RingView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    renderTo(p, size());
}

} // namespace shardscope
