#include "pipeline_view.h"

#include <QHelpEvent>
#include <QPaintEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>
#include <iterator>

namespace shardscope {

namespace {
constexpr int kMarginLeft = 64, kMarginRight = 12, kCaptionHeight = 24, kAxisHeight = 22;
} // namespace

struct PipelineView::Frame {
    QRectF plot; // where the rows go
    double perSecond = 0;
    double rowHeight = 0;

    QRectF cellRect(int rank, double start, double end) const {
        return {plot.left() + start * perSecond, plot.top() + rank * rowHeight + 2,
                std::max(1.0, (end - start) * perSecond), rowHeight - 4};
    }
};

PipelineView::PipelineView(QWidget* parent) : Chart(parent) {
    setMouseTracking(true);
    setMinimumSize(320, 160);
}

QSize PipelineView::sizeHint() const {
    return {900, std::max(200, kCaptionHeight + kAxisHeight + ranks_ * 28)};
}

QColor PipelineView::colorOf(OpKind kind) const {
    // Okabe-Ito: blue forward, bluish green input gradient, orange weight gradient, and a
    // darker green for the fused backward.
    switch (kind) {
    case OpKind::Forward:
        return QColor(0x00, 0x72, 0xB2);
    case OpKind::BackwardInput:
        return QColor(0x00, 0x9E, 0x73);
    case OpKind::BackwardWeight:
        return QColor(0xE6, 0x9F, 0x00);
    case OpKind::Backward:
        return QColor(0x00, 0x7A, 0x5A);
    }
    return Qt::gray;
}

void PipelineView::setTimeline(const PipelineTimeline& t, int virtualStages,
                               const QString& caption) {
    cells_.clear();
    byRank_.assign(t.ranks.size(), {});
    ranks_ = int(t.ranks.size());
    virtualStages_ = std::max(1, virtualStages);
    makespan_ = t.makespan;
    caption_ = caption;
    message_.clear();
    for (std::size_t r = 0; r < t.ranks.size(); ++r) {
        for (const TimedOp& op : t.ranks[r]) {
            byRank_[r].push_back(int(cells_.size()));
            QString tip = QString("rank %1: %2 of microbatch %3")
                              .arg(r)
                              .arg(QString::fromStdString(toString(op.op.kind)))
                              .arg(op.op.microbatch);
            if (virtualStages_ > 1)
                tip += QString(", chunk %1 (stage %2)").arg(op.op.chunk).arg(op.op.stage);
            tip += QString("\n%1 to %2").arg(op.start, 0, 'g', 4).arg(op.end, 0, 'g', 4);
            cells_.push_back({int(r), op.start, op.end, op.op.kind, op.op.chunk,
                              QString::number(op.op.microbatch), tip});
        }
    }
    rankLabels_.clear();
    for (int r = 0; r < ranks_; ++r)
        rankLabels_.push_back(QStringLiteral("rank %1").arg(r));
    makespanLabel_ = QString::number(makespan_, 'g', 4);
    playhead_ = makespan_;
    waits_.clear();
    transfers_.clear();
    update();
}

void PipelineView::setTransfers(std::vector<std::vector<std::pair<double, double>>> transfers) {
    transfers_ = std::move(transfers);
    update();
}

void PipelineView::setWaits(std::vector<std::vector<std::pair<double, double>>> waits) {
    waits_ = std::move(waits);
    update();
}

void PipelineView::clear(const QString& message) {
    cells_.clear();
    byRank_.clear();
    ranks_ = 0;
    makespan_ = 0;
    caption_.clear();
    message_ = message;
    update();
}

void PipelineView::setTimeScale(double seconds) {
    scale_ = seconds;
    update();
}

void PipelineView::setPlayhead(double time) {
    playhead_ = std::clamp(time, 0.0, std::max(makespan_, scale_));
    update();
}

int PipelineView::opAt(int rank, double time) const {
    if (rank < 0 || rank >= ranks_)
        return -1;
    const auto& idx = byRank_[std::size_t(rank)];
    for (std::size_t i = 0; i < idx.size(); ++i) {
        const Cell& c = cells_[std::size_t(idx[i])];
        if (time >= c.start && time < c.end)
            return int(i);
    }
    return -1;
}

double PipelineView::progressOf(int rank, int index) const {
    const Cell& c = cells_[std::size_t(byRank_[std::size_t(rank)][std::size_t(index)])];
    if (playhead_ <= c.start)
        return 0;
    if (playhead_ >= c.end || c.end <= c.start)
        return 1;
    return (playhead_ - c.start) / (c.end - c.start);
}

PipelineView::Frame PipelineView::frameFor(const QSize& size) const {
    Frame f;
    f.plot = QRectF(kMarginLeft, kCaptionHeight, size.width() - kMarginLeft - kMarginRight,
                    size.height() - kCaptionHeight - kAxisHeight);
    const double span = std::max(makespan_, scale_);
    f.perSecond = span > 0 ? f.plot.width() / span : 0;
    f.rowHeight = ranks_ > 0 ? f.plot.height() / ranks_ : 0;
    return f;
}

int PipelineView::printHeight(int) const {
    return int(kCaptionHeight + kAxisHeight) + 8 + 26 * std::max(1, ranks_);
}

void PipelineView::renderComplete(QPainter& painter, const QSize& size) {
    const double at = playhead_;
    playhead_ = makespan_;
    renderTo(painter, size);
    playhead_ = at;
}

void PipelineView::renderTo(QPainter& p, const QSize& size) {
    clearLabels();
    const QPalette& pal = palette();
    p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
    p.setPen(pal.color(QPalette::Text));
    if (ranks_ == 0) {
        p.drawText(QRect(QPoint(0, 0), size), Qt::AlignCenter | Qt::TextWordWrap, message_);
        return;
    }
    const Frame f = frameFor(size);
    // Legend, right-aligned on the caption line; the caption takes what is left, shortened with
    // an ellipsis rather than written under the legend.
    static const std::pair<OpKind, QString> kLegend[] = {
        {OpKind::Forward, QStringLiteral("F forward")},
        {OpKind::Backward, QStringLiteral("B+W backward")},
        {OpKind::BackwardInput, QStringLiteral("B input grad")},
        {OpKind::BackwardWeight, QStringLiteral("W weight grad")}};
    double x = size.width() - kMarginRight;
    for (auto it = std::rbegin(kLegend); it != std::rend(kLegend); ++it) {
        const double w = p.fontMetrics().horizontalAdvance(it->second);
        x -= w;
        drawLabel(p, QRectF(x, 0, w, kCaptionHeight), Qt::AlignLeft | Qt::AlignVCenter, it->second);
        x -= 16;
        p.fillRect(QRectF(x, kCaptionHeight / 2.0 - 5, 10, 10), colorOf(it->first));
        x -= 14;
    }
    const double captionWidth = std::max(0.0, x - 8);
    drawLabel(p, QRectF(0, 0, captionWidth, kCaptionHeight), Qt::AlignLeft | Qt::AlignVCenter,
              p.fontMetrics().elidedText(caption_, Qt::ElideRight, int(captionWidth)));

    // Rows: the whole makespan shaded as bubble; the ops cover what is not idle.
    QColor bubble = pal.color(QPalette::Text);
    bubble.setAlpha(28);
    for (int r = 0; r < ranks_; ++r) {
        const QRectF row(f.plot.left(), f.plot.top() + r * f.rowHeight + 2, makespan_ * f.perSecond,
                         f.rowHeight - 4);
        p.fillRect(row, bubble);
        p.setPen(pal.color(QPalette::Text));
        drawLabel(p, QRectF(0, row.top(), kMarginLeft - 6, row.height()),
                  Qt::AlignRight | Qt::AlignVCenter, rankLabels_[std::size_t(r)]);
    }

    const QFontMetrics fm(p.font());
    const int digitWidth = fm.horizontalAdvance(QLatin1Char('8'));
    for (const Cell& c : cells_) {
        const QRectF rect = f.cellRect(c.rank, c.start, c.end);
        QColor color = colorOf(c.kind);
        if (c.chunk % 2 == 1)
            color = color.lighter(130); // alternate chunks of an interleaved rank
        if (playhead_ >= c.end) {
            p.fillRect(rect, color);
        } else if (playhead_ > c.start) {
            QRectF done = rect;
            done.setWidth((playhead_ - c.start) * f.perSecond);
            p.fillRect(done, color);
            p.setPen(color);
            p.drawRect(rect);
        } else {
            p.setPen(color);
            p.drawRect(rect);
        }
        if (rect.width() >= double(digitWidth * c.label.size() + 4) &&
            rect.height() >= fm.height()) {
            p.setPen(playhead_ > c.start ? QColor(Qt::white) : color);
            p.drawText(rect, Qt::AlignCenter, c.label);
        }
    }

    // Time blocked on a receive or a collective along the bottom of each row, transfers in
    // flight along the top; only what falls inside the pipeline's span.
    const auto strips = [&](const std::vector<std::vector<std::pair<double, double>>>& rows,
                            const QColor& color, bool top) {
        for (std::size_t r = 0; r < rows.size() && int(r) < ranks_; ++r)
            for (const auto& [start, end] : rows[r]) {
                const double from = std::max(0.0, start), to = std::min(makespan_, end);
                if (to <= from)
                    continue;
                const QRectF rect = f.cellRect(int(r), from, to);
                p.fillRect(
                    QRectF(rect.left(), top ? rect.top() : rect.bottom() - 3, rect.width(), 3),
                    color);
            }
    };
    strips(waits_, QColor(0xD5, 0x5E, 0x00), false);
    strips(transfers_, QColor(0x56, 0x56, 0x56), true);

    // The playhead and the time axis.
    p.setPen(pal.color(QPalette::Text));
    const double axisY = f.plot.bottom() + 4;
    p.drawLine(QPointF(f.plot.left(), axisY), QPointF(f.plot.right(), axisY));
    drawLabel(p, QRectF(f.plot.left(), axisY, 80, kAxisHeight - 4), Qt::AlignLeft,
              QStringLiteral("0"));
    drawLabel(p, QRectF(f.plot.left() + makespan_ * f.perSecond - 120, axisY, 120, kAxisHeight - 4),
              Qt::AlignRight, makespanLabel_);
    if (playhead_ < makespan_) {
        QPen pen(QColor(0xD5, 0x5E, 0x00));
        pen.setWidthF(2);
        p.setPen(pen);
        const double at = f.plot.left() + playhead_ * f.perSecond;
        p.drawLine(QPointF(at, f.plot.top()), QPointF(at, f.plot.bottom()));
    }
}

void PipelineView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    renderTo(p, size());
}

QString PipelineView::tooltipAt(const QPoint& pos) const {
    if (ranks_ == 0)
        return {};
    const Frame f = frameFor(size());
    for (const Cell& c : cells_) {
        if (f.cellRect(c.rank, c.start, c.end).contains(pos))
            return c.tip;
    }
    return {};
}

bool PipelineView::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(e);
        const QString tip = tooltipAt(help->pos());
        if (tip.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), tip, this);
        return true;
    }
    return Chart::event(e);
}

} // namespace shardscope
