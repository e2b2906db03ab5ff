// SessionDocument: edits update the estimate, undo/redo restore exactly, slider gestures merge.
#include "session_document.h"

#include <QSignalSpy>
#include <QtTest>

using namespace shardscope;

class TestSessionDocument : public QObject {
    Q_OBJECT
private slots:
    void editUpdatesTheEstimate() {
        SessionDocument doc;
        const double before = doc.estimate().memory.total();
        QSignalSpy changed(&doc, &SessionDocument::changed);
        doc.edit("ZeRO-3", [](Session& s) { s.parallel.zero = 3; });
        QCOMPARE(changed.count(), 1);
        QCOMPARE(doc.session().parallel.zero, 3);
        QVERIFY(doc.estimate().memory.total() < before);
        QVERIFY(doc.isModified());
    }

    void undoAndRedoRestoreExactly() {
        SessionDocument doc;
        const double base = doc.estimate().stepTime;
        doc.edit("tp 4", [](Session& s) { s.parallel.tp = 4; });
        doc.edit("dp 4", [](Session& s) { s.parallel.dp = 4; });
        QCOMPARE(doc.undoStack()->count(), 2);
        doc.undoStack()->undo();
        QCOMPARE(doc.session().parallel.dp, 2);
        QCOMPARE(doc.session().parallel.tp, 4);
        doc.undoStack()->undo();
        QCOMPARE(doc.session().parallel.tp, 8);
        QCOMPARE(doc.estimate().stepTime, base);
        QVERIFY(!doc.isModified());
        doc.undoStack()->redo();
        QCOMPARE(doc.session().parallel.tp, 4);
    }

    void gestureMergesIntoOneStep() {
        SessionDocument doc;
        doc.beginGesture();
        for (int nodes = 9; nodes <= 16; ++nodes)
            doc.edit("nodes", [&](Session& s) { s.cluster.nodes = nodes; });
        doc.endGesture();
        QCOMPARE(doc.undoStack()->count(), 1);
        QCOMPARE(doc.session().cluster.nodes, 16);
        doc.undoStack()->undo();
        QCOMPARE(doc.session().cluster.nodes, 8);
        // Outside a gesture, the same control makes separate steps.
        doc.edit("nodes", [](Session& s) { s.cluster.nodes = 9; });
        doc.edit("nodes", [](Session& s) { s.cluster.nodes = 10; });
        QCOMPARE(doc.undoStack()->count(), 2);
    }

    void twoGesturesStaySeparate() {
        SessionDocument doc;
        for (int g = 0; g < 2; ++g) {
            doc.beginGesture();
            doc.edit("a", [&](Session& s) { s.cluster.nodes = 10 + g; });
            doc.edit("b", [&](Session& s) { s.cluster.nodes = 20 + g; });
            doc.endGesture();
        }
        QCOMPARE(doc.undoStack()->count(), 2);
    }

    void noOpEditLeavesNoStep() {
        SessionDocument doc;
        doc.edit("same", [](Session& s) { s.parallel.tp = 8; });
        QCOMPARE(doc.undoStack()->count(), 0);
        QVERIFY(!doc.isModified());
    }

    void resetClearsHistory() {
        SessionDocument doc;
        doc.edit("tp", [](Session& s) { s.parallel.tp = 2; });
        Session other = defaultSession();
        other.cluster.nodes = 2;
        QSignalSpy path(&doc, &SessionDocument::filePathChanged);
        doc.reset(other, "/tmp/x.shardscope");
        QCOMPARE(doc.undoStack()->count(), 0);
        QCOMPARE(doc.session().cluster.nodes, 2);
        QCOMPARE(doc.filePath(), QString("/tmp/x.shardscope"));
        QCOMPARE(path.count(), 1);
        QVERIFY(!doc.isModified());
    }
};

QTEST_MAIN(TestSessionDocument)
#include "test_session_document.moc"
