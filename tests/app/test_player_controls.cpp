// PlayerControls: play and pause share one button that says what it will do, and Restart goes
// back to the first frame without playing, so a student can read it first.
#include "animation_clock.h"
#include "controls/player_controls.h"

#include <QPushButton>
#include <QtTest>

using namespace shardscope;

class TestPlayerControls : public QObject {
    Q_OBJECT
private slots:
    void restartGoesBackWithoutPlaying() {
        AnimationClock clock(60.0);
        PlayerControls controls(&clock);
        auto* restart = controls.findChild<QPushButton*>("restart");
        QVERIFY(restart);
        clock.setPosition(0.6);
        controls.playButton()->click();
        QVERIFY(clock.playing());
        QCOMPARE(controls.playButton()->text(), QString("Pause"));
        restart->click();
        QCOMPARE(clock.position(), 0.0);
        QVERIFY(!clock.playing());
        QCOMPARE(controls.playButton()->text(), QString("Play"));
        // Paused at the end, Restart also stays paused at the start.
        clock.setPosition(1.0);
        restart->click();
        QCOMPARE(clock.position(), 0.0);
        QVERIFY(!clock.playing());
    }
};

QTEST_MAIN(TestPlayerControls)
#include "test_player_controls.moc"
