#include "ring_view.h"

#include <QPainter>
#include <QPainterPath>
#include <QtMath>
#include <algorithm>
#include <bit>

namespace shardscope {

RingView::RingView(QWidget* parent) : Chart(parent) {
    setMinimumSize(320, 320);
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
    const QPalette& pal = palette();
    p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
    p.setRenderHint(QPainter::Antialiasing);
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRectF(8, 4, size.width() - 16, 22), Qt::AlignLeft | Qt::AlignVCenter, caption_);
    const int n = plan_.spec.ranks;
    if (n == 0)
        return;

    // GPUs on a circle, each a box holding its chunks in a row.
    const QPointF centre(size.width() / 2.0, size.height() / 2.0 + 12);
    const double radius = std::min(size.width(), size.height() - 30) / 2.0 - 48;
    const double boxW = std::clamp(radius * 3.0 / std::max(4, n), 32.0, 120.0);
    const double boxH = std::clamp(boxW * 0.6, 30.0, 56.0);
    const double cellW = (boxW - 6) / plan_.chunks;
    std::vector<QPointF> at(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        const double angle = -M_PI / 2 + 2 * M_PI * r / n;
        at[std::size_t(r)] = centre + QPointF(radius * std::cos(angle), radius * std::sin(angle));
    }
    QColor empty = pal.color(QPalette::Text);
    empty.setAlpha(30);
    for (int r = 0; r < n; ++r) {
        const QRectF box(at[std::size_t(r)] - QPointF(boxW / 2, boxH / 2), QSizeF(boxW, boxH));
        p.setPen(pal.color(QPalette::Text));
        p.setBrush(Qt::NoBrush);
        p.drawRoundedRect(box, 4, 4);
        p.drawText(QRectF(box.left() - 20, box.bottom() + 2, boxW + 40, 16), Qt::AlignCenter,
                   rankLabels_[std::size_t(r)]);
        for (int c = 0; c < plan_.chunks; ++c) {
            const QRectF cell(box.left() + 3 + c * cellW, box.top() + 4, cellW - 1, boxH - 8);
            p.fillRect(cell, empty);
            const double fill = fillOf(r, c);
            if (fill > 0) {
                QRectF part = cell;
                part.setTop(cell.bottom() - cell.height() * fill);
                p.fillRect(part, chunkColor(c));
            }
        }
    }

    // Arrows for the step under way, with a dot travelling along each.
    const int s = currentStep();
    if (s >= stepCount())
        return;
    const double frac = time_ - s;
    for (const ChunkTransfer& t : plan_.steps[std::size_t(s)].transfers) {
        const QPointF a = at[std::size_t(t.from)], b = at[std::size_t(t.to)];
        const QPointF d = b - a;
        const double len = std::hypot(d.x(), d.y());
        if (len < 1)
            continue;
        const QPointF u = d / len;
        const QPointF from = a + u * (boxH * 0.8), to = b - u * (boxH * 0.8);
        QPen pen(chunkColor(t.chunk));
        pen.setWidthF(2);
        p.setPen(pen);
        p.drawLine(from, to);
        const QPointF normal(-u.y(), u.x());
        QPainterPath head;
        head.moveTo(to);
        head.lineTo(to - u * 9 + normal * 4);
        head.lineTo(to - u * 9 - normal * 4);
        head.closeSubpath();
        p.fillPath(head, chunkColor(t.chunk));
        p.setBrush(chunkColor(t.chunk));
        p.drawEllipse(from + (to - from) * frac, 4, 4);
    }
}

void RingView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    renderTo(p, size());
}

} // namespace shardscope
