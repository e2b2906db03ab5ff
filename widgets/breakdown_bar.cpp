#include "breakdown_bar.h"

#include "chart_style.h"
#include "core/units.h"

#include <QHelpEvent>
#include <QPainter>

namespace shardscope {

namespace {

constexpr int kMargin = 8;
constexpr int kSwatch = 10;

// Where everything goes for one size; painting and hit-testing share it.
struct BarLayout {
    QRect bar;
    double total = 0;              // sum of the positive values
    std::vector<QRectF> segments;  // per segment; empty when skipped
    std::vector<QRect> legend;     // per segment legend entry; empty when skipped
    std::vector<QString> captions; // legend text per segment
};

int barHeight(const QFontMetrics& fm) {
    return std::max(28, fm.height() + 12);
}

QString share(double value, double total) {
    return detail::toQString(formatPercent(value / total));
}

BarLayout layoutFor(const std::vector<Segment>& segments, ValueKind kind, const QSize& size,
                    const QFontMetrics& fm) {
    BarLayout l;
    l.bar = QRect(kMargin, kMargin, std::max(1, size.width() - 2 * kMargin), barHeight(fm));
    for (const Segment& s : segments)
        if (s.value > 0)
            l.total += s.value;
    l.segments.resize(segments.size());
    l.legend.resize(segments.size());
    l.captions.resize(segments.size());
    if (l.total <= 0)
        return l;

    double x = l.bar.left();
    int lx = kMargin, ly = l.bar.bottom() + 1 + kMargin;
    const int lineHeight = fm.height() + 4;
    for (std::size_t i = 0; i < segments.size(); ++i) {
        const Segment& s = segments[i];
        if (!(s.value > 0))
            continue;
        const double w = l.bar.width() * s.value / l.total;
        l.segments[i] = QRectF(x, l.bar.top(), w, l.bar.height());
        x += w;

        l.captions[i] = s.label + QLatin1Char(' ') + detail::formatValue(s.value, kind) +
                        QStringLiteral(" (") + share(s.value, l.total) + QLatin1Char(')');
        const int entryWidth = kSwatch + 4 + fm.horizontalAdvance(l.captions[i]);
        if (lx > kMargin && lx + entryWidth > size.width() - kMargin) { // wrap
            lx = kMargin;
            ly += lineHeight;
        }
        l.legend[i] = QRect(lx, ly, entryWidth, lineHeight);
        lx += entryWidth + 14;
    }
    return l;
}

} // namespace

BreakdownBar::BreakdownBar(QWidget* parent) : Chart(parent) {
    setTitle(tr("Breakdown"));
    QSizePolicy policy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    policy.setHeightForWidth(true);
    setSizePolicy(policy);
}

void BreakdownBar::setSegments(std::vector<Segment> segments, ValueKind kind) {
    segments_ = std::move(segments);
    kind_ = kind;
    updateGeometry();
    update();
}

QString BreakdownBar::tooltipAt(const QPoint& pos) const {
    const BarLayout l = layoutFor(segments_, kind_, size(), fontMetrics());
    for (std::size_t i = 0; i < segments_.size(); ++i) {
        if (!l.segments[i].contains(pos) && !l.legend[i].contains(pos))
            continue;
        const Segment& s = segments_[i];
        QString text = s.label + QStringLiteral(": ") + detail::formatValue(s.value, kind_) +
                       QStringLiteral(" (") + share(s.value, l.total) + QStringLiteral(" of ") +
                       detail::formatValue(l.total, kind_) + QLatin1Char(')');
        if (!s.tooltip.isEmpty())
            text += QLatin1Char('\n') + s.tooltip;
        return text;
    }
    return {};
}

QSize BreakdownBar::sizeHint() const {
    return {520, heightForWidth(520)};
}

int BreakdownBar::heightForWidth(int width) const {
    const BarLayout l = layoutFor(segments_, kind_, QSize(width, 0), fontMetrics());
    int bottom = l.bar.bottom() + 1;
    for (const QRect& e : l.legend)
        if (!e.isEmpty())
            bottom = std::max(bottom, e.bottom() + 1);
    return bottom + kMargin;
}

void BreakdownBar::renderTo(QPainter& painter, const QSize& size) {
    clearLabels();
    const QPalette& pal = palette();
    painter.save();
    painter.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
    painter.setFont(font());
    const QFontMetrics fm(font(), painter.device());
    const BarLayout l = layoutFor(segments_, kind_, size, fm);
    const QColor fg = pal.color(QPalette::Text);

    if (l.total <= 0) {
        painter.setPen(QPen(detail::mix(pal.color(QPalette::Base), fg, 0.3), 1, Qt::DashLine));
        painter.drawRect(l.bar.adjusted(0, 0, -1, -1));
        painter.setPen(pal.color(QPalette::PlaceholderText));
        painter.drawText(l.bar, Qt::AlignCenter, tr("nothing to show"));
        painter.restore();
        return;
    }

    painter.setRenderHint(QPainter::Antialiasing, false);
    for (std::size_t i = 0; i < segments_.size(); ++i) {
        if (l.segments[i].isEmpty())
            continue;
        const QColor color = detail::categoryColor(static_cast<int>(i));
        const QRectF r = l.segments[i];
        painter.fillRect(r, color);
        // Label inside the segment only when it fits with some air.
        const QString withShare =
            segments_[i].label + QLatin1Char(' ') + share(segments_[i].value, l.total);
        QString text;
        if (fm.horizontalAdvance(withShare) + 8 <= r.width())
            text = withShare;
        else if (fm.horizontalAdvance(segments_[i].label) + 8 <= r.width())
            text = segments_[i].label;
        if (!text.isEmpty()) {
            painter.setPen(detail::textOn(color));
            drawLabel(painter, r, Qt::AlignCenter, text);
        }
    }
    painter.setPen(QPen(detail::mix(pal.color(QPalette::Base), fg, 0.5), 1));
    painter.drawRect(QRectF(l.bar).adjusted(0, 0, -1, -1));

    painter.setRenderHint(QPainter::Antialiasing, true);
    for (std::size_t i = 0; i < segments_.size(); ++i) {
        const QRect e = l.legend[i];
        if (e.isEmpty())
            continue;
        const QRect swatch(e.left(), e.center().y() - kSwatch / 2, kSwatch, kSwatch);
        painter.fillRect(swatch, detail::categoryColor(static_cast<int>(i)));
        painter.setPen(fg);
        drawLabel(painter, e.adjusted(kSwatch + 4, 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
                  l.captions[i]);
    }
    painter.restore();
}

void BreakdownBar::paintEvent(QPaintEvent*) {
    QPainter painter(this);
    renderTo(painter, size());
}

bool BreakdownBar::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(e);
        detail::showToolTip(help, this, tooltipAt(help->pos()));
        return true;
    }
    if (e->type() == QEvent::PaletteChange || e->type() == QEvent::FontChange)
        update();
    return Chart::event(e);
}

} // namespace shardscope
