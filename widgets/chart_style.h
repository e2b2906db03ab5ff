// Internal to the widgets library: colours, number formatting and QCustomPlot plumbing shared by
// the charts. Not part of the app's contract.
#pragma once

#include "series_chart.h"

#include <QColor>
#include <QString>
#include <functional>
#include <qcustomplot.h>
#include <string>
#include <vector>

class QHelpEvent;
class QPainter;
class QPalette;
class QWidget;

namespace shardscope::detail {

// Okabe-Ito without black (colour-blind safe, legible on light and dark backgrounds), then the
// nine colours (mostly Kelly's of maximum contrast) that keep the 16 farthest apart: at least 67
// in RGB distance from each other, for up to 16 groups.
inline constexpr int kCategoryColorCount = 16;
QColor categoryColor(int index); // cycles
// Past 16 groups colours repeat: the hatching over a group's colour tells its round of 16
// apart (none for groups 0-15, diagonal lines for 16-31, a cross for 32-47, and round again).
Qt::BrushStyle categoryHatch(int index);
// Black or white, whichever reads on `background`.
QColor textOn(const QColor& background);
// `a` moved towards `b` by `t` (0..1): derives grid and panel colours from the palette.
QColor mix(const QColor& a, const QColor& b, double t);
bool isDark(const QPalette& palette);

QString toQString(const std::string& s);
// Full value for tooltips and legends ("40.0 GB").
QString formatValue(double v, ValueKind kind);
// Shorter value for axis ticks: trailing zeros dropped ("40 GB", "2.5 s").
QString formatTick(double v, ValueKind kind);

// Show `text` (plain) as a tooltip that wraps long formulas; hides it when empty.
void showToolTip(const QHelpEvent* event, QWidget* widget, const QString& text);

// Linear and logarithmic tickers whose labels come from a formatter, so data stays in raw units.
class FormatTicker : public QCPAxisTicker {
public:
    explicit FormatTicker(std::function<QString(double)> format) : format_(std::move(format)) {}

protected:
    QString getTickLabel(double tick, const QLocale& locale, QChar formatChar,
                         int precision) override;

private:
    std::function<QString(double)> format_;
};

class FormatLogTicker : public QCPAxisTickerLog {
public:
    explicit FormatLogTicker(std::function<QString(double)> format) : format_(std::move(format)) {}

protected:
    QString getTickLabel(double tick, const QLocale& locale, QChar formatChar,
                         int precision) override;

private:
    std::function<QString(double)> format_;
};

// A plot with no interactions, styled from `palette`, legend in a column right of the axes.
void setUpPlot(QCustomPlot& plot, bool legendOnRight);
// The legend in a row under the axis rect, wrapping after `columns` entries: it covers no data
// and leaves the plot its width (what a narrow chart needs most).
void placeLegendBelow(QCustomPlot& plot, int columns);
// As many legend columns as fit in `widthPixels` with every entry whole (at most `most`).
void fitLegendColumns(QCustomPlot& plot, int widthPixels, int most);
// Axes, grid, text and legend colours from the palette (called again on palette changes).
void stylePlot(QCustomPlot& plot, const QPalette& palette);
// QCustomPlot only paints through a QCPPainter: record into a QPicture, which replays as vector
// commands on SVG and PDF painters. `relayout` replots afterwards, which restores the on-screen
// layout that hit-testing relies on.
// Returns where its text went (tick labels, legend entries, text items), in the painter's
// coordinates, for the test that no two labels overlap.
std::vector<QRectF> renderPlot(QCustomPlot& plot, QPainter& painter, const QSize& size,
                               bool relayout = true);

} // namespace shardscope::detail
