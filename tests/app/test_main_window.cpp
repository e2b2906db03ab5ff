// The main window: sessions (save, open, recent), bad files change nothing, drag and drop of a
// config.json, pages and their views.
#include "chart.h"
#include "lesson_note.h"
#include "main_window.h"
#include "pages/page.h"

#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QMimeData>
#include <QPainter>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QUrl>
#include <QtTest>
#include <nlohmann/json.hpp>

using namespace shardscope;

namespace {
std::string snapshot(SessionDocument* doc) {
    return sessionToJson(doc->session()).dump();
}

QString handle(MainWindow& w, const QString& path) {
    QSignalSpy handled(&w, &MainWindow::fileHandled);
    w.openFile(path);
    if (!handled.wait(10000))
        return "timed out";
    return handled.first().first().toString();
}
QString rectText(const QRectF& r) {
    return QString("(%1,%2 %3x%4)").arg(r.x()).arg(r.y()).arg(r.width()).arg(r.height());
}
} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName("ShardscopeTest");
        QCoreApplication::setApplicationName("test_main_window");
    }

    void startsOnTheDefaultSessionWithBothPages() {
        MainWindow w;
        w.setQuiet(true);
        QCOMPARE(w.document()->session().model.id, std::string("llama3-70b"));
        QCOMPARE(int(w.pages().size()), 5);
        QVERIFY(w.page("memory") && w.page("explorer") && w.page("pipeline") &&
                w.page("collectives") && w.page("monitor"));
        QCOMPARE(w.currentPage()->id(), QString("memory"));
        QVERIFY(w.showPage("explorer"));
        QCOMPARE(w.currentPage()->id(), QString("explorer"));
        QVERIFY(!w.showPage("nope"));
        QVERIFY(w.windowTitle().contains("Untitled"));
        // Exported charts name what they show: the session's model, cluster and layout, or the
        // page's own lesson.
        const QString memory = w.page("memory")->charts().front()->caption();
        QVERIFY2(memory.startsWith("Llama 3 70B on 64 x NVIDIA H100") &&
                     memory.contains("dp2 tp8 pp4"),
                 qPrintable(memory));
        const QString ring = w.page("collectives")->charts().front()->caption();
        QVERIFY2(ring.startsWith("Ring all-reduce of 1.00 GB on 8 GPUs"), qPrintable(ring));
        w.document()->edit("tp 4", [](Session& s) { s.parallel.tp = 4; });
        QVERIFY(w.page("memory")->charts().front()->caption().contains("tp4"));
    }

    // A 1280 x 720 screen holds the window with its title bar and a taskbar: panels scroll or
    // shrink rather than push the window past it. Every page says what its figure shows.
    void fitsA1280By720Screen() {
        MainWindow w;
        w.setQuiet(true);
        QString sizes;
        for (Page* page : w.pages()) {
            sizes += QString(" %1 %2x%3")
                         .arg(page->id())
                         .arg(page->minimumSizeHint().width())
                         .arg(page->minimumSizeHint().height());
            auto* lesson = page->findChild<LessonNote*>();
            QVERIFY2(lesson && lesson->html().contains("Try:"), qPrintable(page->id()));
        }
        const QSize least = w.minimumSizeHint();
        QVERIFY2(least.width() <= 1280 && least.height() <= 660,
                 qPrintable(
                     QString("window %1x%2;%3").arg(least.width()).arg(least.height()).arg(sizes)));
    }

    // At 1280 x 720, on every page and view, no two text labels of a chart overlap (each chart
    // reports where its labels went when it draws).
    void chartLabelsNeverOverlapAt1280x720() {
        MainWindow w;
        w.setQuiet(true);
        w.resize(1280, 720);
        w.show();
        const std::vector<std::pair<QString, QString>> views = {
            {"memory", "holdings"},    {"memory", "share"},   {"explorer", "overview"},
            {"explorer", "cluster"},   {"explorer", "layer"}, {"pipeline", ""},
            {"collectives", "step-3"}, {"monitor", ""}};
        QStringList problems;
        int checked = 0;
        for (const auto& [id, view] : views) {
            QVERIFY(w.showPage(id));
            QVERIFY(w.currentPage()->showView(view));
            QApplication::processEvents();
            for (Chart* chart : w.currentPage()->charts()) {
                if (!chart->isVisible() || chart->width() < 50 || chart->height() < 50)
                    continue;
                QImage image(chart->size(), QImage::Format_ARGB32);
                QPainter painter(&image);
                chart->renderTo(painter, chart->size());
                painter.end();
                const auto& labels = chart->labelRects();
                ++checked;
                for (std::size_t i = 0; i < labels.size(); ++i)
                    for (std::size_t j = i + 1; j < labels.size(); ++j)
                        if (labels[i].intersects(labels[j]))
                            problems << QString("%1/%2 \"%3\" (%4x%5): labels %6 and %7 overlap")
                                            .arg(id, view, chart->title())
                                            .arg(chart->width())
                                            .arg(chart->height())
                                            .arg(rectText(labels[i]), rectText(labels[j]));
            }
        }
        QVERIFY(checked >= 8);
        for (const QString& p : problems)
            qWarning("%s", qPrintable(p));
        QVERIFY2(problems.isEmpty(), qPrintable(QString::number(problems.size()) + " overlaps"));
    }

    void remembersItsSizeAndTheme() {
        {
            QSettings().setValue("view/theme", "dark");
            MainWindow w;
            w.setQuiet(true);
            w.show();
            w.resize(1500, 877);
            QVERIFY(w.close()); // saves the window state
            // The dark theme was applied at start: the window background is dark.
            QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 100);
        }
        MainWindow again;
        again.show();
        QCOMPARE(again.size(), QSize(1500, 877));
        // The Theme menu marks the one that is on, and choosing another moves the mark.
        QVERIFY(again.findChild<QAction*>("theme-dark")->isChecked());
        QVERIFY(!again.findChild<QAction*>("theme-light")->isChecked());
        QSettings().setValue("view/theme", "light");
        MainWindow light;
        QVERIFY(QApplication::palette().color(QPalette::Window).lightness() > 150);
        QVERIFY(light.findChild<QAction*>("theme-light")->isChecked());
        light.findChild<QAction*>("theme-system")->trigger();
        QVERIFY(light.findChild<QAction*>("theme-system")->isChecked());
        QVERIFY(!light.findChild<QAction*>("theme-light")->isChecked());
        QCOMPARE(QSettings().value("view/theme").toString(), QString("system"));
    }

    void aboutNamesTheVersions() {
        // The About box's text, as About Shardscope shows it.
        QVERIFY(MainWindow::aboutText().contains(SHARDSCOPE_VERSION));
        QVERIFY(MainWindow::aboutText().contains(qVersion()));
        QVERIFY(MainWindow::aboutText().contains("QCustomPlot"));
    }

    void sessionRoundTripThroughAFile() {
        QTemporaryDir dir;
        const QString path = QDir(dir.path()).filePath("plan.shardscope");
        MainWindow w;
        w.setQuiet(true);
        w.document()->edit("tp 4", [](Session& s) {
            s.parallel.tp = 4;
            s.parallel.dp = 4;
        });
        w.showPage("explorer");
        QVERIFY(w.document()->isModified());
        QCOMPARE(w.saveSessionAs(path), QString());
        QVERIFY(!w.document()->isModified());
        QVERIFY(w.windowTitle().contains("plan.shardscope"));
        QCOMPARE(w.recentFiles().first(), QFileInfo(path).absoluteFilePath());
        Session written = loadSession(path.toStdString());
        QCOMPARE(written.page, std::string("explorer")); // where the user was
        const std::string saved = sessionToJson(written).dump();

        MainWindow fresh;
        fresh.setQuiet(true);
        QCOMPARE(handle(fresh, path), QString());
        QCOMPARE(snapshot(fresh.document()), saved);
        QCOMPARE(fresh.currentPage()->id(), QString("explorer")); // reopens where it was saved
        QCOMPARE(fresh.document()->filePath(), path);
        QVERIFY(!fresh.document()->isModified());
    }

    void malformedAndFutureSessionsChangeNothing() {
        QTemporaryDir dir;
        MainWindow w;
        w.setQuiet(true);
        w.document()->edit("zero", [](Session& s) { s.parallel.zero = 2; });
        const std::string before = snapshot(w.document());
        const int steps = w.document()->undoStack()->count();

        const QString bad = QDir(dir.path()).filePath("bad.shardscope");
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"format\": \"shardscope-session\", \"version\": 1, \"model\": 3");
        f.close();
        QVERIFY(handle(w, bad).contains("bad.shardscope"));
        QCOMPARE(snapshot(w.document()), before);

        nlohmann::json future = sessionToJson(defaultSession());
        future["version"] = Session::kFormatVersion + 1;
        const QString newer = QDir(dir.path()).filePath("newer.shardscope");
        QFile g(newer);
        QVERIFY(g.open(QIODevice::WriteOnly));
        g.write(QByteArray::fromStdString(future.dump()));
        g.close();
        QVERIFY(handle(w, newer).contains("newer Shardscope"));
        QCOMPARE(snapshot(w.document()), before);
        QCOMPARE(w.document()->undoStack()->count(), steps);
    }

    void droppedConfigJsonLoadsTheModel() {
        MainWindow w;
        w.setQuiet(true);
        QSignalSpy handled(&w, &MainWindow::fileHandled);
        auto* mime = new QMimeData;
        mime->setUrls({QUrl::fromLocalFile(SHARDSCOPE_TEST_DATA "/hf/mistral-7b-v0.1.json")});
        QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&w, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(10, 10), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&w, &drop);
        QVERIFY(handled.wait(10000));
        QCOMPARE(handled.first().first().toString(), QString());
        const Session& s = w.document()->session();
        QVERIFY(s.modelSource == ModelSource::HuggingFace);
        QCOMPARE(s.model.hidden, 4096);
        QCOMPARE(s.model.kvHeads, 8);
        // The model picker names the model, not the file type.
        auto* picker = w.page("memory")->findChild<QComboBox*>("model");
        QVERIFY(picker);
        QCOMPARE(picker->currentText(), "Imported: " + QString::fromStdString(s.model.name));
        QCOMPARE(s.model.name, std::string("mistral-7b-v0.1")); // the file: no _name_or_path
        // Importing is one undoable step.
        w.document()->undoStack()->undo();
        QCOMPARE(w.document()->session().model.id, std::string("llama3-70b"));
        delete mime;
    }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
