// Base of every chart: a widget that can draw itself onto any painter at any size, so exports
// are vector graphics where the format allows (SVG, PDF) and pixels only for PNG.
#pragma once

#include <QSize>
#include <QString>
#include <QWidget>

class QPainter;

namespace shardscope {

class Chart : public QWidget {
    Q_OBJECT
public:
    explicit Chart(QWidget* parent = nullptr);

    // Draw the whole chart into `size` pixels (or points) of `painter`, as it looks on screen.
    virtual void renderTo(QPainter& painter, const QSize& size) = 0;

    // Shown in export dialogs and as the caption in reports ("Memory per GPU").
    QString title() const { return title_; }
    void setTitle(const QString& title);

protected:
    // Right-click offers "Save image as..." (PNG, SVG, PDF).
    void contextMenuEvent(QContextMenuEvent* event) override;

private:
    QString title_;
};

// Write the chart to `path`; the format follows the extension (.png, .svg, .pdf). `size` defaults
// to the widget's size (at least 640 x 400). Returns an empty string on success, otherwise a
// message naming the file and what went wrong.
QString exportChart(Chart& chart, const QString& path, QSize size = {});

} // namespace shardscope
