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

QString exportChart(Chart& chart, const QString& path, QSize size) {
    if (size.isEmpty())
        size = chart.size().expandedTo(QSize(640, 400));
    const QString suffix = QFileInfo(path).suffix().toLower();

    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);

    if (suffix == QLatin1String("png")) {
        QImage image(size, QImage::Format_ARGB32_Premultiplied);
        image.setDevicePixelRatio(1);
        image.setDotsPerMeterX(qRound(kExportDpi / 0.0254));
        image.setDotsPerMeterY(qRound(kExportDpi / 0.0254));
        image.fill(chart.palette().color(QPalette::Base));
        {
            QPainter painter(&image);
            chart.renderTo(painter, size);
        }
        QImageWriter writer(&buffer, "png");
        if (!writer.write(image))
            return QObject::tr("Cannot encode \"%1\": %2").arg(path, writer.errorString());
    } else if (suffix == QLatin1String("svg")) {
        QSvgGenerator generator;
        generator.setOutputDevice(&buffer);
        generator.setSize(size);
        generator.setViewBox(QRect(QPoint(0, 0), size));
        generator.setResolution(kExportDpi);
        generator.setTitle(chart.title());
        generator.setDescription(QObject::tr("Created by Shardscope"));
        QPainter painter;
        if (!painter.begin(&generator))
            return QObject::tr("Cannot render \"%1\" as SVG").arg(path);
        chart.renderTo(painter, size);
        painter.end();
    } else if (suffix == QLatin1String("pdf")) {
        QPdfWriter writer(&buffer);
        writer.setResolution(kExportDpi);
        writer.setTitle(chart.title());
        writer.setCreator(QStringLiteral("Shardscope"));
        // One page exactly the chart's size, no margins.
        const QSizeF points(size.width() * 72.0 / kExportDpi, size.height() * 72.0 / kExportDpi);
        writer.setPageLayout(
            QPageLayout(QPageSize(points, QPageSize::Point, QString(), QPageSize::ExactMatch),
                        QPageLayout::Portrait, QMarginsF(0, 0, 0, 0)));
        QPainter painter;
        if (!painter.begin(&writer))
            return QObject::tr("Cannot render \"%1\" as PDF").arg(path);
        // The page may be rounded to whole points: scale the chart onto it exactly.
        const double sx = writer.width() / static_cast<double>(size.width());
        const double sy = writer.height() / static_cast<double>(size.height());
        painter.scale(sx, sy);
        chart.renderTo(painter, size);
        painter.end();
    } else {
        return QObject::tr("Cannot save \"%1\": unknown image type \"%2\"; use .png, .svg or .pdf")
            .arg(path, suffix.isEmpty() ? QObject::tr("(none)") : QLatin1Char('.') + suffix);
    }
    buffer.close();
    return saveFileAtomically(path, bytes);
}

} // namespace shardscope
