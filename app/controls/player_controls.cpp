#include "player_controls.h"

#include "animation_clock.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>

namespace shardscope {

PlayerControls::PlayerControls(AnimationClock* clock, QWidget* parent)
    : QWidget(parent), row_(new QHBoxLayout(this)), play_(new QPushButton("Play", this)) {
    row_->setContentsMargins(0, 0, 0, 0);
    play_->setObjectName("play");
    auto* restart = new QPushButton("Restart", this);
    restart->setObjectName("restart");
    auto* speed = new QComboBox(this);
    speed->setObjectName("speed");
    for (double x : {0.25, 0.5, 1.0, 2.0, 4.0})
        speed->addItem(QString("%1x").arg(x), x);
    speed->setCurrentIndex(2);
    row_->addWidget(play_);
    row_->addWidget(restart);
    row_->addWidget(new QLabel("Speed", this));
    row_->addWidget(speed);
    connect(play_, &QPushButton::clicked, clock,
            [clock] { clock->playing() ? clock->pause() : clock->play(); });
    // Back to the first frame, paused: the student reads it and presses Play when ready.
    connect(restart, &QPushButton::clicked, clock, [clock] {
        clock->pause();
        clock->setPosition(0);
    });
    connect(speed, &QComboBox::activated, clock,
            [clock, speed](int i) { clock->setSpeed(speed->itemData(i).toDouble()); });
    connect(clock, &AnimationClock::playingChanged, this,
            [this](bool on) { play_->setText(on ? "Pause" : "Play"); });
}

QPushButton* PlayerControls::addButton(const QString& text) {
    auto* b = new QPushButton(text, this);
    row_->insertWidget(buttons_++, b);
    return b;
}

void PlayerControls::addTrailing(QWidget* w, int stretch) {
    row_->addWidget(w, stretch);
}

} // namespace shardscope
