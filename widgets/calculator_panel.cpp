#include "calculator_panel.h"

#include "lesson_note.h"

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QVBoxLayout>

namespace shardscope {

namespace {

QString escaped(const std::string& s) {
    return QString::fromStdString(s).toHtmlEscaped();
}

// Tinted background and a solid border of the level's colour over the window colour: the text
// keeps the palette's own colour, so it reads in light and dark themes alike.
QString verdictStyle(VerdictLevel level) {
    QColor color;
    switch (level) {
    case VerdictLevel::Good:
        color = QColor(0x00, 0x9E, 0x73);
        break;
    case VerdictLevel::Warning:
        color = QColor(0xE6, 0x9F, 0x00);
        break;
    case VerdictLevel::Bad:
        color = QColor(0xD5, 0x5E, 0x00);
        break;
    }
    QColor tint = color;
    tint.setAlpha(48);
    return QStringLiteral("QLabel { background-color: %1; border: 1px solid %2; "
                          "border-left: 5px solid %2; border-radius: 3px; padding: 8px; }")
        .arg(tint.name(QColor::HexArgb), color.name(QColor::HexRgb));
}

} // namespace

CalculatorPanel::CalculatorPanel(QWidget* parent)
    : QWidget(parent), controlsArea_(new QScrollArea), verdict_(new QLabel),
      lesson_(new LessonNote), pictureLayout_(new QVBoxLayout), formulas_(new QPlainTextEdit),
      splitter_(new QSplitter), pictureSplitter_(new QSplitter(Qt::Vertical)) {
    splitter_->setOrientation(Qt::Horizontal);
    splitter_->setChildrenCollapsible(false);

    controlsArea_->setWidgetResizable(true);
    controlsArea_->setFrameShape(QFrame::NoFrame);
    controlsArea_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    controlsArea_->setMinimumWidth(260);
    splitter_->addWidget(controlsArea_);

    auto* right = new QWidget;
    auto* rightLayout = new QVBoxLayout(right);
    rightLayout->setContentsMargins(0, 0, 0, 0);
    verdict_->setWordWrap(true);
    verdict_->setTextFormat(Qt::RichText); // pages emphasise figures and list problems
    verdict_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    verdict_->setAccessibleName(tr("Verdict"));
    verdict_->setVisible(false);
    rightLayout->addWidget(verdict_);
    rightLayout->addWidget(lesson_);
    pictureLayout_->setContentsMargins(0, 0, 0, 0);
    // The picture scrolls when the window is smaller than its charts want (a 1280 x 720 screen),
    // rather than pushing the window past the screen.
    auto* picture = new QWidget;
    picture->setLayout(pictureLayout_);
    auto* pictureArea = new QScrollArea;
    pictureArea->setWidgetResizable(true);
    pictureArea->setFrameShape(QFrame::NoFrame);
    pictureArea->setWidget(picture);
    pictureSplitter_->addWidget(pictureArea);
    // A plain-text view lays out only the lines on screen; a rich-text browser would lay out the
    // whole panel on every control change (most of a redraw's time on the Explorer page).
    formulas_->setReadOnly(true);
    formulas_->setUndoRedoEnabled(false); // edits in place would pile up history otherwise
    formulas_->setAccessibleName(tr("Formulas"));
    formulas_->setMinimumHeight(60);
    pictureSplitter_->addWidget(formulas_);
    pictureSplitter_->setChildrenCollapsible(false);
    pictureSplitter_->setStretchFactor(0, 3);
    pictureSplitter_->setStretchFactor(1, 1);
    pictureSplitter_->setSizes({600, 200});
    rightLayout->addWidget(pictureSplitter_, 1);
    splitter_->addWidget(right);
    splitter_->setStretchFactor(0, 0);
    splitter_->setStretchFactor(1, 1);
    // Controls get a column's width; the picture and formulas get the rest.
    splitter_->setSizes({320, 880});

    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(splitter_);
    setVerdict(QString(), VerdictLevel::Good);
}

void CalculatorPanel::setControls(QWidget* controls) {
    controlsArea_->setWidget(controls); // deletes the previous controls
    // Wide enough that no field is cut off: the area never scrolls sideways.
    const int width =
        controls->sizeHint().width() + controlsArea_->verticalScrollBar()->sizeHint().width();
    controlsArea_->setMinimumWidth(std::max(260, width));
}

void CalculatorPanel::setPicture(QWidget* picture) {
    while (QLayoutItem* item = pictureLayout_->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    if (picture != nullptr)
        pictureLayout_->addWidget(picture);
}

void CalculatorPanel::setLesson(const QString& key, const QString& html) {
    lesson_->setLesson(key, html);
}

void CalculatorPanel::setExplanations(const std::vector<Explanation>& explanations) {
    explanations_ = explanations;
    std::vector<FormulaLine> lines;
    for (const Explanation& e : explanations) {
        QString heading = QString::fromStdString(e.label);
        if (!e.display.empty())
            heading += " = " + QString::fromStdString(e.display);
        lines.push_back({heading, LineStyle::Heading});
        if (!e.formula.empty())
            lines.push_back({QString::fromStdString(e.formula), LineStyle::Formula});
        if (!e.substituted.empty())
            lines.push_back({"= " + QString::fromStdString(e.substituted), LineStyle::Formula});
        if (!e.source.empty())
            lines.push_back({QString::fromStdString(e.source), LineStyle::Source});
        lines.push_back({QString(), LineStyle::Source}); // space between figures
    }
    showFormulaLines(std::move(lines));
}

QTextCharFormat CalculatorPanel::formatFor(LineStyle style) const {
    QTextCharFormat f;
    switch (style) {
    case LineStyle::Heading:
        f.setFontWeight(QFont::Bold);
        break;
    case LineStyle::Formula:
        f.setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
        break;
    case LineStyle::Source:
        f.setFontItalic(true);
        f.setFontPointSize(std::max(6.0, font().pointSizeF() * 0.85));
        break;
    }
    return f;
}

void CalculatorPanel::showFormulaLines(std::vector<FormulaLine> lines) {
    // A control change alters a few numbers: rewrite only the lines that changed, so the view
    // re-lays out a handful of lines instead of the whole panel (most of a redraw's cost before).
    QTextDocument* doc = formulas_->document();
    const bool sameShape =
        lines.size() == lines_.size() &&
        std::equal(lines.begin(), lines.end(), lines_.begin(),
                   [](const FormulaLine& a, const FormulaLine& b) { return a.style == b.style; });
    QTextCursor cursor(doc);
    cursor.beginEditBlock();
    if (sameShape) {
        QTextBlock block = doc->begin();
        for (std::size_t i = 0; i < lines.size() && block.isValid(); ++i, block = block.next()) {
            if (lines[i].text == lines_[i].text)
                continue;
            cursor.setPosition(block.position());
            cursor.movePosition(QTextCursor::EndOfBlock, QTextCursor::KeepAnchor);
            cursor.insertText(lines[i].text, formatFor(lines[i].style));
        }
    } else {
        const int scroll = formulas_->verticalScrollBar()->value(); // keep the reader's place
        doc->clear();
        for (std::size_t i = 0; i < lines.size(); ++i) {
            if (i > 0)
                cursor.insertBlock();
            cursor.insertText(lines[i].text, formatFor(lines[i].style));
        }
        formulas_->verticalScrollBar()->setValue(scroll);
    }
    cursor.endEditBlock();
    lines_ = std::move(lines);
}

void CalculatorPanel::setVerdict(const QString& text, VerdictLevel level) {
    level_ = level;
    verdict_->setText(text);
    verdict_->setStyleSheet(verdictStyle(level));
    verdict_->setVisible(!text.isEmpty());
}

QString CalculatorPanel::verdictText() const {
    return verdict_->text();
}

QString CalculatorPanel::formulaHtml() const {
    // Built on demand: only reports and tests read it, not every control change.
    QString html;
    for (const Explanation& e : explanations_) {
        html += QStringLiteral("<p><b>%1</b>").arg(escaped(e.label));
        if (!e.display.empty())
            html += QStringLiteral(" = %1").arg(escaped(e.display));
        if (!e.formula.empty())
            html += QStringLiteral("<br><tt>%1</tt>").arg(escaped(e.formula));
        if (!e.substituted.empty())
            html += QStringLiteral("<br><tt>= %1</tt>").arg(escaped(e.substituted));
        if (!e.source.empty())
            html += QStringLiteral("<br><small><i>%1</i></small>").arg(escaped(e.source));
        html += QStringLiteral("</p>");
    }
    return html;
}

} // namespace shardscope
