// A short paragraph beside a figure saying what it shows and what to try, as the Ultra-Scale
// Playbook weaves its text around its widgets. The reader can hide it; the choice is kept for
// each page on this machine (QSettings "lessons/KEY/hidden"), never in a session file.
#pragma once

#include <QWidget>

class QLabel;
class QToolButton;

namespace shardscope {

class LessonNote : public QWidget {
    Q_OBJECT
public:
    explicit LessonNote(QWidget* parent = nullptr);

    // Rich text; `key` names the page ("collectives") for the remembered choice.
    void setLesson(const QString& key, const QString& html);
    QString html() const;

    bool textShown() const { return shown_; }
    void setTextShown(bool shown); // remembered

private:
    void showState();

    QLabel* text_;
    QToolButton* toggle_;
    QString key_;
    bool shown_ = true;
};

} // namespace shardscope
