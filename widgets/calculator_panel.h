// The frame every page uses: controls on the left; on the right a plain verdict, the picture,
// and the formula panel with the user's numbers substituted and the source of each figure.
#pragma once

#include "plan/explain.h"

#include <QTextCharFormat>
#include <QWidget>
#include <vector>

class QLabel;
class QScrollArea;
class QSplitter;
class QPlainTextEdit;
class QVBoxLayout;

namespace shardscope {

class LessonNote;

enum class VerdictLevel { Good, Warning, Bad };

class CalculatorPanel : public QWidget {
    Q_OBJECT
public:
    explicit CalculatorPanel(QWidget* parent = nullptr);

    void setControls(QWidget* controls); // takes ownership; placed in a scroll area
    void setPicture(QWidget* picture);   // takes ownership
    // The formula panel: one entry per figure (label, value, formula, substituted, source).
    void setExplanations(const std::vector<Explanation>& explanations);
    // The page's hideable paragraph on what the picture shows and what to try (rich text).
    void setLesson(const QString& key, const QString& html);
    LessonNote* lesson() const { return lesson_; }
    // Rich text: callers escape what they did not write themselves.
    void setVerdict(const QString& text, VerdictLevel level);

    QString verdictText() const;
    VerdictLevel verdictLevel() const { return level_; }
    QString formulaHtml() const; // what the formula panel shows, for reports and tests

private:
    enum class LineStyle { Heading, Formula, Source };
    struct FormulaLine {
        QString text;
        LineStyle style;
    };
    QTextCharFormat formatFor(LineStyle style) const;
    void showFormulaLines(std::vector<FormulaLine> lines);

    QScrollArea* controlsArea_;
    QLabel* verdict_;
    LessonNote* lesson_;
    QVBoxLayout* pictureLayout_;
    QPlainTextEdit* formulas_;
    QSplitter* splitter_;
    QSplitter* pictureSplitter_;            // the picture over the formulas, resizable
    std::vector<Explanation> explanations_; // the figures shown; formulaHtml() is built from them
    std::vector<FormulaLine> lines_;        // what the formula panel shows, one text block each
    VerdictLevel level_ = VerdictLevel::Good;
};

} // namespace shardscope
