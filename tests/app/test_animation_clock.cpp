// AnimationClock: a position from 0 to 1, set by hand or advanced in real time, that stops at
// the end and says so.
#include "animation_clock.h"

#include <QSignalSpy>
#include <QtTest>

using namespace shardscope;

class TestAnimationClock : public QObject {
    Q_OBJECT
private slots:
    void startsAtTheEndAndClamps() {
        AnimationClock clock(6.0);
        QCOMPARE(clock.position(), 1.0);
        QSignalSpy moved(&clock, &AnimationClock::positionChanged);
        clock.setPosition(-3);
        QCOMPARE(clock.position(), 0.0);
        clock.setPosition(0.25);
        QCOMPARE(moved.count(), 2);
        QCOMPARE(moved.last().first().toDouble(), 0.25);
    }

    void playRestartsFromTheEndAndStopsThere() {
        AnimationClock clock(6.0);
        QSignalSpy playing(&clock, &AnimationClock::playingChanged);
        clock.play(); // at the end: back to the start
        QCOMPARE(clock.position(), 0.0);
        QVERIFY(clock.playing());
        clock.setPosition(1.0);
        QVERIFY(!clock.playing());
        QCOMPARE(playing.count(), 2);
        QCOMPARE(playing.last().first().toBool(), false);
    }

    // A page that changes how long its run takes keeps its place in it.
    void aNewRunLengthKeepsThePosition() {
        AnimationClock clock(6.0);
        clock.setPosition(0.4);
        clock.setPlaySeconds(12.0);
        QCOMPARE(clock.position(), 0.4);
        QCOMPARE(clock.playSeconds(), 12.0);
    }

    void advancesInRealTime() {
        AnimationClock clock(0.5); // a half-second run
        clock.setPosition(0);
        clock.setSpeed(2.0);
        clock.play();
        QTRY_VERIFY_WITH_TIMEOUT(!clock.playing(), 5000); // done in about 0.25 s
        QCOMPARE(clock.position(), 1.0);
    }
};

QTEST_MAIN(TestAnimationClock)
#include "test_animation_clock.moc"
