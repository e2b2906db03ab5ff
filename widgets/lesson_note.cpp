#include "lesson_note.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QSettings>
#include <QToolButton>

namespace shardscope {

LessonNote::LessonNote(QWidget* parent)
    : QWidget(parent), text_(new QLabel), toggle_(new QToolButton) {
    auto* row = new QHBoxLayout(this);
    row->setContentsMargins(0, 0, 0, 0);
    text_->setWordWrap(true);
    text_->setTextFormat(Qt::RichText);
    text_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    text_->setAccessibleName(tr("About this figure"));
    text_->setContentsMargins(2, 2, 2, 2);
    toggle_->setObjectName("lesson-toggle");
    toggle_->setAutoRaise(true);
    row->addWidget(text_, 1);
    row->addWidget(toggle_, 0, Qt::AlignTop);
    connect(toggle_, &QToolButton::clicked, this, [this] { setTextShown(!shown_); });
    setVisible(false); // until a page gives it a lesson
}

void LessonNote::setLesson(const QString& key, const QString& html) {
    key_ = key;
    text_->setText(html);
    shown_ = !QSettings().value("lessons/" + key_ + "/hidden", false).toBool();
    setVisible(!html.isEmpty());
    showState();
}

QString LessonNote::html() const {
    return text_->text();
}

void LessonNote::setTextShown(bool shown) {
    shown_ = shown;
    if (!key_.isEmpty())
        QSettings().setValue("lessons/" + key_ + "/hidden", !shown);
    showState();
}

void LessonNote::showState() {
    text_->setVisible(shown_);
    toggle_->setText(shown_ ? tr("Hide") : tr("About this figure..."));
    toggle_->setToolTip(shown_ ? tr("Hide this explanation (it stays hidden on this page)")
                               : tr("Show what this figure shows and what to try"));
    // Hidden, the button alone sits at the right end of its row.
    layout()->setAlignment(toggle_, shown_ ? Qt::AlignTop : Qt::AlignRight | Qt::AlignTop);
}

} // namespace shardscope
