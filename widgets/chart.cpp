#include "chart.h"

#include "save_file.h"

#include <QBuffer>
#include <QContextMenuEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QImage>
#include <QImageWriter>
#include <QMenu>
#include <QMessageBox>
#include <QPageLayout>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QSvgGenerator>

namespace shardscope {

namespace {

// Exports use the screen's nominal resolution, so fonts given in points come out the size they
// have on screen relative to the chart.
constexpr int kExportDpi = 96;
constexpr int kExportScale = 2; // PNG pixels per point of the chart

QString suggestedFileName(const QString& title) {
    QString name = title.trimmed().toLower();
    name.replace(QRegularExpression(QStringLiteral("[^a-z0-9]+")), QStringLiteral("-"));
    name.remove(QRegularExpression(QStringLiteral("^-+|-+$")));
    return name.isEmpty() ? QStringLiteral("chart") : name;
}

} // namespace

Chart::Chart(QWidget* parent) : QWidget(parent) {}

void Chart::setTitle(const QString& title) {
    title_ = title;
}

void Chart::setCaption(const QString& caption) {
    caption_ = caption;
}

void Chart::drawLabel(QPainter& painter, const QRectF& rect, int flags, const QString& text) {
    QRectF covered;
    painter.drawText(rect, flags, text, &covered);
    labelRects_.push_back(painter.transform().mapRect(covered));
}

void Chart::contextMenuEvent(QContextMenuEvent* event) {
    QMenu menu(this);
    QAction* save = menu.addAction(tr("Save image as..."));
    if (menu.exec(event->globalPos()) != save)
        return;

    const QString png = tr("PNG image (*.png)"), svg = tr("SVG image (*.svg)"),
                  pdf = tr("PDF document (*.pdf)");
    QString filter = png;
    const QString dir = QStandardPaths::writableLocation(QStandardPaths::PicturesLocation);
    QString path = QFileDialog::getSaveFileName(
        this, tr("Save %1").arg(title_.isEmpty() ? tr("chart") : title_),
        dir + QLatin1Char('/') + suggestedFileName(title_) + QStringLiteral(".png"),
        png + QStringLiteral(";;") + svg + QStringLiteral(";;") + pdf, &filter);
    if (path.isEmpty())
        return;
    // Some platform dialogs return the name as typed, without the filter's extension.
    if (QFileInfo(path).suffix().isEmpty())
        path += filter == svg ? QStringLiteral(".svg")
                              : (filter == pdf ? QStringLiteral(".pdf") : QStringLiteral(".png"));
    const QString error = exportChart(*this, path);
    if (!error.isEmpty())
        QMessageBox::warning(this, tr("Save image"), error);
}

namespace {

// An exported chart reads on its own: its title above, the chart, and a caption below naming
// what it shows (model, cluster and layout), all inside one picture.
struct Framed {
    QFont titleFont, captionFont;
    int titleHeight = 0, captionHeight = 0;
    QSize chart, whole;
};

Framed frameFor(const Chart& chart, QSize size) {
    Framed f;
    f.chart = size;
    f.titleFont = chart.font();
    f.titleFont.setBold(true);
    f.titleFont.setPointSizeF(std::max(9.0, chart.font().pointSizeF() * 1.15));
    f.captionFont = chart.font();
    f.captionFont.setPointSizeF(std::max(8.0, chart.font().pointSizeF() * 0.9));
    if (!chart.title().isEmpty())
        f.titleHeight = QFontMetrics(f.titleFont).height() + 10;
    if (!chart.caption().isEmpty()) {
        const QRect text = QFontMetrics(f.captionFont)
                               .boundingRect(QRect(0, 0, size.width() - 16, 10000),
                                             Qt::TextWordWrap, chart.caption());
        f.captionHeight = text.height() + 10;
    }
    f.whole = QSize(size.width(), size.height() + f.titleHeight + f.captionHeight);
    return f;
}

void renderFramed(Chart& chart, QPainter& painter, const Framed& f) {
    const QPalette& pal = chart.palette();
    painter.fillRect(QRect(QPoint(0, 0), f.whole), pal.color(QPalette::Base));
    painter.setPen(pal.color(QPalette::Text));
    if (f.titleHeight > 0) {
        painter.setFont(f.titleFont);
        painter.drawText(QRect(8, 0, f.whole.width() - 16, f.titleHeight),
                         Qt::AlignLeft | Qt::AlignVCenter, chart.title());
    }
    painter.save();
    painter.translate(0, f.titleHeight);
    painter.setFont(chart.font());
    chart.renderTo(painter, f.chart);
    painter.restore();
    if (f.captionHeight > 0) {
        painter.setFont(f.captionFont);
        painter.setPen(pal.color(QPalette::Text));
        painter.drawText(QRect(8, f.titleHeight + f.chart.height() + 4, f.whole.width() - 16,
                               f.captionHeight - 4),
                         Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, chart.caption());
    }
}

} // namespace

QString exportChart(Chart& chart, const QString& path, QSize size) {
    if (size.isEmpty())
        size = chart.size().expandedTo(QSize(640, 400));
    const QString suffix = QFileInfo(path).suffix().toLower();
    const Framed f = frameFor(chart, size);

    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);

    if (suffix == QLatin1String("png")) {
        // Twice the pixels: sharp on a high-density screen and in a printed document.
        QImage image(f.whole * kExportScale, QImage::Format_ARGB32_Premultiplied);
        image.setDevicePixelRatio(kExportScale);
        image.setDotsPerMeterX(qRound(kExportDpi * kExportScale / 0.0254));
        image.setDotsPerMeterY(qRound(kExportDpi * kExportScale / 0.0254));
        {
            QPainter painter(&image);
            renderFramed(chart, painter, f);
        }
        QImageWriter writer(&buffer, "png");
        if (!writer.write(image))
            return QObject::tr("Cannot encode \"%1\": %2").arg(path, writer.errorString());
    } else if (suffix == QLatin1String("svg")) {
        QSvgGenerator generator;
        generator.setOutputDevice(&buffer);
        generator.setSize(f.whole);
        generator.setViewBox(QRect(QPoint(0, 0), f.whole));
        generator.setResolution(kExportDpi);
        generator.setTitle(chart.title());
        generator.setDescription(chart.caption().isEmpty() ? QObject::tr("Created by Shardscope")
                                                           : chart.caption());
        QPainter painter;
        if (!painter.begin(&generator))
            return QObject::tr("Cannot render \"%1\" as SVG").arg(path);
        renderFramed(chart, painter, f);
        painter.end();
    } else if (suffix == QLatin1String("pdf")) {
        QPdfWriter writer(&buffer);
        writer.setResolution(kExportDpi);
        writer.setTitle(chart.title());
        writer.setCreator(QStringLiteral("Shardscope"));
        // One page exactly the picture's size, no margins.
        const QSizeF points(f.whole.width() * 72.0 / kExportDpi,
                            f.whole.height() * 72.0 / kExportDpi);
        writer.setPageLayout(
            QPageLayout(QPageSize(points, QPageSize::Point, QString(), QPageSize::ExactMatch),
                        QPageLayout::Portrait, QMarginsF(0, 0, 0, 0)));
        QPainter painter;
        if (!painter.begin(&writer))
            return QObject::tr("Cannot render \"%1\" as PDF").arg(path);
        // The page may be rounded to whole points: scale the picture onto it exactly.
        painter.scale(writer.width() / double(f.whole.width()),
                      writer.height() / double(f.whole.height()));
        renderFramed(chart, painter, f);
        painter.end();
    } else {
        return QObject::tr("Cannot save \"%1\": unknown image type \"%2\"; use .png, .svg or .pdf")
            .arg(path, suffix.isEmpty() ? QObject::tr("(none)") : QLatin1Char('.') + suffix);
    }
    buffer.close();
    return saveFileAtomically(path, bytes);
}

} // namespace shardscope
