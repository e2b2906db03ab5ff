// Base of every chart: a widget that can draw itself onto any painter at any size, so exports
// are vector graphics where the format allows (SVG, PDF) and pixels only for PNG.
#pragma once

#include <QRectF>
#include <QSize>
#include <QString>
#include <QWidget>
#include <vector>

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
    // Under the chart in exports: what it shows ("Llama 3 70B on 64 x H100, dp2 tp8 pp4 ...").
    QString caption() const { return caption_; }
    void setCaption(const QString& caption);

    // How tall the chart reads best when printed `width` points wide (reports): its height for
    // that width when it has one, else half the width.
    virtual int printHeight(int width) const {
        return hasHeightForWidth() ? heightForWidth(width) : width / 2;
    }

    // The chart as it is when its animation has run to the end (a whole pipeline timeline, not
    // the frame the playhead stopped at): what a report prints. By default renderTo.
    virtual void renderComplete(QPainter& painter, const QSize& size) { renderTo(painter, size); }

    // Jump to the end of any animation under way, so a grab of the widget shows the final
    // state (headless renders; exports through renderTo do it themselves).
    virtual void finishAnimations() {}

    // Where the text labels of the last renderTo went, in its coordinates: what tests check
    // for overlaps. Charts that draw with QPainter record each label through drawLabel.
    const std::vector<QRectF>& labelRects() const { return labelRects_; }

protected:
    // Start of a renderTo: forget the last render's labels.
    void clearLabels() { labelRects_.clear(); }
    // Draw `text` in `rect` and record the rectangle it actually covers.
    void drawLabel(QPainter& painter, const QRectF& rect, int flags, const QString& text);
    // Record a label another library drew.
    void addLabelRect(const QRectF& rect) { labelRects_.push_back(rect); }

    // Right-click offers "Save image as..." (PNG, SVG, PDF).
    void contextMenuEvent(QContextMenuEvent* event) override;

private:
    QString title_;
    QString caption_;
    std::vector<QRectF> labelRects_;
};

// Write the chart to `path`; the format follows the extension (.png, .svg, .pdf): its title above
// it and its caption below, the chart itself `size` points (default the widget's size, at least
// 640 x 400); a PNG has two pixels per point. Returns an empty string on success, otherwise a
// message naming the file and what went wrong.
QString exportChart(Chart& chart, const QString& path, QSize size = {});

} // namespace shardscope
