#include "animation_clock.h"

#include <algorithm>

namespace shardscope {

AnimationClock::AnimationClock(double playSeconds, QObject* parent)
    : QObject(parent), playSeconds_(playSeconds) {
    timer_.setInterval(16); // about one frame
    connect(&timer_, &QTimer::timeout, this, &AnimationClock::tick);
}

void AnimationClock::setPosition(double position) {
    position_ = std::clamp(position, 0.0, 1.0);
    emit positionChanged(position_);
    if (position_ >= 1.0)
        pause();
}

void AnimationClock::play() {
    if (position_ >= 1.0)
        setPosition(0);
    startedAt_ = position_;
    clock_.start();
    timer_.start();
    emit playingChanged(true);
}

void AnimationClock::pause() {
    if (!timer_.isActive())
        return;
    timer_.stop();
    emit playingChanged(false);
}

void AnimationClock::setSpeed(double speed) {
    startedAt_ = position_;
    clock_.start(); // restart() on a never-started timer is undefined
    speed_ = speed;
}

void AnimationClock::setPlaySeconds(double seconds) {
    startedAt_ = position_;
    clock_.start(); // restart() on a never-started timer is undefined
    playSeconds_ = std::max(seconds, 1e-3);
}

void AnimationClock::tick() {
    setPosition(startedAt_ + speed_ * double(clock_.elapsed()) / 1000.0 / playSeconds_);
}

} // namespace shardscope
