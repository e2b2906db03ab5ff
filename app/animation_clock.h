// The play/pause clock of the teaching animations: a position from 0 to 1 that advances in real
// time (a whole run takes `playSeconds` at 1x) and stops at 1. Pages draw from the position
// alone, so setting it by hand (tests, scrubbing, headless renders) gives the same picture.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>

namespace shardscope {

class AnimationClock : public QObject {
    Q_OBJECT
public:
    explicit AnimationClock(double playSeconds, QObject* parent = nullptr);

    double position() const { return position_; }
    void setPosition(double position); // clamped to [0, 1]; reaching 1 pauses
    void play();                       // from the start again when at the end
    void pause();
    bool playing() const { return timer_.isActive(); }
    void setSpeed(double speed);
    // How long a whole run takes at 1x; the position stays where it is.
    void setPlaySeconds(double seconds);
    double playSeconds() const { return playSeconds_; }

signals:
    void positionChanged(double position);
    void playingChanged(bool playing);

private:
    void tick();

    QTimer timer_;
    QElapsedTimer clock_;
    double playSeconds_;
    double speed_ = 1.0;
    double startedAt_ = 0;
    double position_ = 1.0; // the finished picture until Play is pressed
};

} // namespace shardscope
