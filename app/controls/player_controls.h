// The row of controls every animated page has: play/pause, restart and speed, bound to an
// AnimationClock, with room for the page's own (step buttons, a scrub bar, the step label).
#pragma once

#include <QWidget>

class QHBoxLayout;
class QPushButton;

namespace shardscope {

class AnimationClock;

class PlayerControls : public QWidget {
    Q_OBJECT
public:
    PlayerControls(AnimationClock* clock, QWidget* parent = nullptr);

    // Add a page-specific button before the speed chooser, or a widget after it.
    QPushButton* addButton(const QString& text);
    void addTrailing(QWidget* w, int stretch = 0);

    QPushButton* playButton() const { return play_; }

private:
    QHBoxLayout* row_;
    QPushButton* play_;
    int buttons_ = 2; // play and restart come first
};

} // namespace shardscope
