// LessonNote: the paragraph beside a figure shows until the reader hides it, and stays hidden
// on that page (only) the next time the app starts.
#include "lesson_note.h"

#include <QSettings>
#include <QStandardPaths>
#include <QToolButton>
#include <QtTest>

using namespace shardscope;

class TestLessonNote : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName("ShardscopeTest");
        QCoreApplication::setApplicationName("test_lesson_note");
        QSettings().remove("lessons");
    }

    void hidingIsRememberedPerPage() {
        QWidget window;
        auto* note = new LessonNote(&window);
        QVERIFY(!note->isVisibleTo(&window)); // nothing to say yet
        note->setLesson("memory", "Each bar is <b>one GPU</b>.");
        QVERIFY(note->isVisibleTo(&window));
        QVERIFY(note->textShown());
        auto* toggle = note->findChild<QToolButton*>("lesson-toggle");
        QVERIFY(toggle);
        toggle->click();
        QVERIFY(!note->textShown());
        QVERIFY(note->isVisibleTo(&window)); // the button to bring it back stays

        LessonNote again, other;
        again.setLesson("memory", "Each bar is one GPU.");
        other.setLesson("pipeline", "Each row is one stage.");
        QVERIFY(!again.textShown());
        QVERIFY(other.textShown());
        again.findChild<QToolButton*>("lesson-toggle")->click();
        LessonNote third;
        third.setLesson("memory", "x");
        QVERIFY(third.textShown());
    }
};

QTEST_MAIN(TestLessonNote)
#include "test_lesson_note.moc"
