#include "chart_style.h"

#include "core/units.h"

#include <QHelpEvent>
#include <QImage>
#include <QPaintEngine>
#include <QPainter>
#include <QPalette>
#include <QPicture>
#include <QToolTip>
#include <QWidget>
#include <algorithm>
#include <array>
#include <cmath>

namespace shardscope::detail {

QColor categoryColor(int index) {
    static const std::array<QColor, kCategoryColorCount> colors = {
        QColor(0x00, 0x72, 0xB2), // blue
        QColor(0xE6, 0x9F, 0x00), // orange
        QColor(0x00, 0x9E, 0x73), // bluish green
        QColor(0xD5, 0x5E, 0x00), // vermillion
        QColor(0x56, 0xB4, 0xE9), // sky blue
        QColor(0xCC, 0x79, 0xA7), // reddish purple
        QColor(0xF0, 0xE4, 0x42), // yellow
        QColor(0x87, 0x56, 0x92), // Kelly's strong purple
        QColor(0xA1, 0xCA, 0xF1), // very light blue
        QColor(0xBE, 0x00, 0x32), // vivid red
        QColor(0xC2, 0xB2, 0x80), // greyish yellow
        QColor(0x88, 0x2D, 0x17), // strong reddish brown
        QColor(0x8D, 0xB6, 0x00), // vivid yellowish green
        QColor(0x2B, 0x3D, 0x26), // dark olive green
        QColor(0x00, 0x00, 0x80), // navy
        QColor(0x00, 0xCE, 0xD1), // dark turquoise
    };
    const int n = kCategoryColorCount;
    return colors[static_cast<std::size_t>(((index % n) + n) % n)];
}

Qt::BrushStyle categoryHatch(int index) {
    static const std::array<Qt::BrushStyle, 3> hatches = {Qt::NoBrush, Qt::BDiagPattern,
                                                          Qt::DiagCrossPattern};
    const int round = std::max(0, index) / kCategoryColorCount;
    return hatches[static_cast<std::size_t>(round % 3)];
}

QColor textOn(const QColor& background) {
    const double luma =
        0.299 * background.redF() + 0.587 * background.greenF() + 0.114 * background.blueF();
    return luma > 0.55 ? QColor(Qt::black) : QColor(Qt::white);
}

QColor mix(const QColor& a, const QColor& b, double t) {
    const auto lerp = [t](float x, float y) { return static_cast<float>(x + (y - x) * t); };
    return QColor::fromRgba(QColor::fromRgbF(lerp(a.redF(), b.redF()), lerp(a.greenF(), b.greenF()),
                                             lerp(a.blueF(), b.blueF()),
                                             lerp(a.alphaF(), b.alphaF()))
                                .rgba());
}

bool isDark(const QPalette& palette) {
    return palette.color(QPalette::Base).lightnessF() < 0.5;
}

QString toQString(const std::string& s) {
    return QString::fromStdString(s);
}

QString formatValue(double v, ValueKind kind) {
    switch (kind) {
    case ValueKind::Bytes:
        return toQString(formatBytes(v));
    case ValueKind::Seconds:
        return toQString(formatSeconds(v));
    case ValueKind::Rate:
        return toQString(formatRate(v));
    case ValueKind::Plain:
        break;
    }
    // Counts of GPUs and the like stay whole (1024, not "1020"); a measured or predicted value
    // keeps the digits it has ("46100", not "46069.9").
    if (v == std::floor(v) && std::fabs(v) < 1e15)
        return QString::number(static_cast<long long>(v));
    return toQString(formatNumber(v));
}

namespace {

// "40.0 GB" -> "40 GB", "2.50 s" -> "2.5 s"; scientific notation is left alone.
QString trimZeros(const QString& s) {
    const qsizetype end = s.indexOf(QLatin1Char(' ')) < 0 ? s.size() : s.indexOf(QLatin1Char(' '));
    QString number = s.left(end);
    if (!number.contains(QLatin1Char('.')) || number.contains(QLatin1Char('e')))
        return s;
    while (number.endsWith(QLatin1Char('0')))
        number.chop(1);
    if (number.endsWith(QLatin1Char('.')))
        number.chop(1);
    return number + s.mid(end);
}

} // namespace

QString formatTick(double v, ValueKind kind) {
    return trimZeros(formatValue(v, kind));
}

void showToolTip(const QHelpEvent* event, QWidget* widget, const QString& text) {
    if (text.isEmpty()) {
        QToolTip::hideText();
        return;
    }
    // Rich text so long formulas wrap; the text itself is escaped.
    QString html = text.toHtmlEscaped();
    html.replace(QLatin1Char('\n'), QStringLiteral("<br>"));
    QToolTip::showText(event->globalPos(), QStringLiteral("<qt>%1</qt>").arg(html), widget);
}

QString FormatTicker::getTickLabel(double tick, const QLocale&, QChar, int) {
    // Ticks near zero come out as 1e-17 from floating-point steps.
    return format_(std::fabs(tick) < 1e-12 ? 0.0 : tick);
}

QString FormatLogTicker::getTickLabel(double tick, const QLocale&, QChar, int) {
    return format_(tick);
}

void setUpPlot(QCustomPlot& plot, bool legendOnRight) {
    plot.setInteractions({});
    plot.setAutoAddPlottableToLegend(false);
    plot.legend->setVisible(true);
    plot.xAxis2->setVisible(false);
    plot.yAxis2->setVisible(false);
    if (legendOnRight) {
        // A column right of the axis rect, top-aligned by a stretchy spacer under the legend.
        auto* side = new QCPLayoutGrid;
        plot.plotLayout()->addElement(0, 1, side);
        plot.plotLayout()->setColumnStretchFactor(1, 0.001);
        plot.axisRect()->insetLayout()->take(plot.legend);
        side->addElement(0, 0, plot.legend);
        side->addElement(1, 0, new QCPLayoutElement(&plot));
        side->setRowStretchFactor(0, 0.001);
        plot.legend->setMargins(QMargins(6, 4, 6, 4));
        side->setMargins(QMargins(0, 8, 8, 8));
    }
}

void placeLegendBelow(QCustomPlot& plot, int columns) {
    // In a row of its own beside an empty element: the row, not the legend, sets how wide the
    // column may grow (an empty legend alone would hold the axis rect to its own few pixels).
    auto* row = new QCPLayoutGrid;
    plot.plotLayout()->addElement(1, 0, row);
    plot.plotLayout()->setRowStretchFactor(1, 0.001);
    plot.axisRect()->insetLayout()->take(plot.legend);
    row->addElement(0, 0, plot.legend);
    row->addElement(0, 1, new QCPLayoutElement(&plot));
    row->setColumnStretchFactor(0, 0.001);
    plot.legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    plot.legend->setWrap(columns);
    plot.legend->setMargins(QMargins(4, 2, 4, 2));
    plot.legend->setRowSpacing(0);
    plot.legend->setColumnSpacing(8);
    plot.legend->setBorderPen(Qt::NoPen);
    plot.legend->setMaximumSize(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX);
}

void fitLegendColumns(QCustomPlot& plot, int widthPixels, int most) {
    int widest = 1;
    for (int i = 0; i < plot.legend->itemCount(); ++i) {
        if (const QCPAbstractLegendItem* item = plot.legend->item(i)) // empty cells are null
            widest = std::max(widest, item->minimumOuterSizeHint().width());
    }
    const int spacing = plot.legend->columnSpacing();
    const int columns = std::clamp((widthPixels - 8 + spacing) / (widest + spacing), 1, most);
    if (plot.legend->wrap() != columns) {
        plot.legend->setWrap(columns);
        plot.legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
    }
}

void stylePlot(QCustomPlot& plot, const QPalette& palette) {
    const QColor bg = palette.color(QPalette::Base);
    const QColor fg = palette.color(QPalette::Text);
    const QColor grid = mix(bg, fg, 0.22);
    const QColor subGrid = mix(bg, fg, 0.10);
    plot.setBackground(bg);
    for (QCPAxisRect* rect : plot.axisRects()) {
        rect->setBackground(Qt::NoBrush);
        for (QCPAxis* axis : rect->axes()) {
            axis->setBasePen(QPen(fg, 1));
            axis->setTickPen(QPen(fg, 1));
            axis->setSubTickPen(QPen(fg, 1));
            axis->setTickLabelColor(fg);
            axis->setLabelColor(fg);
            axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
            axis->grid()->setSubGridPen(QPen(subGrid, 1, Qt::DotLine));
            axis->grid()->setZeroLinePen(Qt::NoPen);
        }
    }
    plot.legend->setBrush(bg);
    // A frame only where the legend sits over the plot.
    const bool over = plot.legend->layout() == plot.axisRect()->insetLayout();
    plot.legend->setBorderPen(over ? QPen(grid) : QPen(Qt::NoPen));
    plot.legend->setTextColor(fg);
}

namespace {

// Where QCustomPlot put its text at the size it last laid out for: each axis's tick labels (the
// way QCPAxisPainterPrivate places them), the legend's entries and the text items. A pixel is
// taken off each side, so labels that only touch do not count as overlapping.
std::vector<QRectF> plotLabelRects(const QCustomPlot& plot) {
    std::vector<QRectF> out;
    for (QCPAxisRect* rect : plot.axisRects()) {
        for (QCPAxis* axis : rect->axes()) {
            if (!axis->visible() || !axis->tickLabels())
                continue;
            const QFontMetricsF fm(axis->tickLabelFont());
            const QVector<double> ticks = axis->tickVector();
            const QVector<QString> labels = axis->tickVectorLabels();
            const double distance =
                axis->offset() + axis->tickLabelPadding() + std::max(0, axis->tickLengthOut());
            for (qsizetype i = 0; i < ticks.size() && i < labels.size(); ++i) {
                if (labels[i].isEmpty() || !axis->range().contains(ticks[i]))
                    continue;
                QRectF r = fm.boundingRect(QRectF(), Qt::TextDontClip | Qt::AlignCenter, labels[i]);
                if (axis->tickLabelRotation() != 0) {
                    QTransform turn;
                    turn.rotate(axis->tickLabelRotation());
                    r = turn.mapRect(r);
                }
                const double at = axis->coordToPixel(ticks[i]);
                const QRect area = rect->rect();
                switch (axis->axisType()) {
                case QCPAxis::atBottom:
                    r.moveCenter({at, area.bottom() + distance + r.height() / 2});
                    break;
                case QCPAxis::atTop:
                    r.moveCenter({at, area.top() - distance - r.height() / 2});
                    break;
                case QCPAxis::atLeft:
                    r.moveCenter({area.left() - distance - r.width() / 2, at});
                    break;
                case QCPAxis::atRight:
                    r.moveCenter({area.right() + distance + r.width() / 2, at});
                    break;
                }
                out.push_back(r.adjusted(1, 1, -1, -1));
            }
        }
    }
    if (plot.legend != nullptr && plot.legend->visible()) {
        for (int i = 0; i < plot.legend->itemCount(); ++i) {
            if (const QCPAbstractLegendItem* item = plot.legend->item(i))
                out.push_back(QRectF(item->outerRect()).adjusted(1, 1, -1, -1));
        }
    }
    for (int i = 0; i < plot.itemCount(); ++i) {
        const auto* text = qobject_cast<const QCPItemText*>(plot.item(i));
        if (text == nullptr || !text->visible() || text->text().isEmpty())
            continue;
        const QFontMetricsF fm(text->font());
        QRectF r = fm.boundingRect(QRectF(), Qt::TextDontClip | Qt::AlignCenter, text->text());
        r = r.marginsAdded(QMarginsF(text->padding()));
        const QPointF at = text->position->pixelPosition();
        const Qt::Alignment align = text->positionAlignment();
        QPointF topLeft(at.x() - r.width() / 2, at.y() - r.height() / 2);
        if (align & Qt::AlignLeft)
            topLeft.setX(at.x());
        else if (align & Qt::AlignRight)
            topLeft.setX(at.x() - r.width());
        if (align & Qt::AlignTop)
            topLeft.setY(at.y());
        else if (align & Qt::AlignBottom)
            topLeft.setY(at.y() - r.height());
        out.push_back(QRectF(topLeft, r.size()).adjusted(1, 1, -1, -1));
    }
    return out;
}

} // namespace

std::vector<QRectF> renderPlot(QCustomPlot& plot, QPainter& painter, const QSize& size,
                               bool relayout) {
    const QPaintEngine* engine = painter.paintEngine();
    if (engine != nullptr && engine->type() == QPaintEngine::Raster) {
        // Pixels anyway: paint straight into an image, which is far cheaper than recording
        // 100k scatter points into a picture first.
        const qreal dpr = painter.device()->devicePixelRatioF();
        QImage image((QSizeF(size) * dpr).toSize(), QImage::Format_ARGB32_Premultiplied);
        image.setDevicePixelRatio(dpr);
        image.fill(Qt::transparent);
        {
            QCPPainter direct(&image);
            plot.toPainter(&direct, size.width(), size.height());
        }
        painter.drawImage(QPointF(0, 0), image);
    } else {
        QPicture picture;
        {
            QCPPainter recorder(&picture);
            recorder.setMode(QCPPainter::pmVectorized); // no pixel-snapping tweaks
            plot.toPainter(&recorder, size.width(), size.height());
        }
        painter.save();
        painter.drawPicture(0, 0, picture);
        painter.restore();
    }
    std::vector<QRectF> labels = plotLabelRects(plot);
    for (QRectF& r : labels)
        r = painter.transform().mapRect(r);
    // toPainter leaves the layout computed for `size`; hit-testing needs the on-screen one.
    if (relayout)
        plot.replot(QCustomPlot::rpQueuedRefresh);
    return labels;
}

} // namespace shardscope::detail
