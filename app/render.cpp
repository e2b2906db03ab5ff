#include "render.h"

#include "file_loader.h"
#include "main_window.h"
#include "pages/explorer_page.h"
#include "pages/monitor_page.h"
#include "pages/page.h"

#include <QApplication>
#include <QEventLoop>
#include <QFileInfo>
#include <QImageWriter>
#include <QStatusBar>
#include <QTimer>

namespace shardscope {

QString renderPage(const RenderRequest& r) {
    if (r.output.isEmpty())
        return "--render needs an output file: -o OUT.png";
    if (QFileInfo(r.output).suffix().toLower() != "png")
        return "--render writes PNG images: give -o a name ending in .png";
    if (r.size.width() < 320 || r.size.height() < 240 || r.size.width() > 8192 ||
        r.size.height() > 8192)
        return "--size must be between 320x240 and 8192x8192";

    MainWindow window;
    window.setQuiet(true);
    applyTheme(themeFromString(r.theme));
    if (!r.session.isEmpty()) {
        const LoadedFile f = loadFile(r.session);
        if (!f.session)
            return f.error.isEmpty() ? r.session + " is a model config, not a session" : f.error;
        window.applyLoadedFile(f);
    }
    if (!r.run.isEmpty()) {
        if (const QString error = window.openRun(r.run); !error.isEmpty())
            return error;
    }
    const QString pageId = r.page.section('/', 0, 0);
    const QString view = r.page.section('/', 1);
    if (!window.showPage(pageId)) {
        QStringList ids;
        for (const Page* p : window.pages())
            ids << p->id();
        return QString("unknown page \"%1\" (pages: %2)").arg(pageId, ids.join(", "));
    }
    Page* page = window.currentPage();
    if (!page->showView(view))
        return QString("page \"%1\" has no view \"%2\" (views: %3)")
            .arg(pageId, view.left(40), page->viewsHelp());

    if (auto* explorer = qobject_cast<ExplorerPage*>(page); explorer && view == "search") {
        QEventLoop loop;
        QObject::connect(explorer, &ExplorerPage::searchFinished, &loop, &QEventLoop::quit);
        explorer->startSearch();
        QTimer::singleShot(5 * 60 * 1000, &loop, &QEventLoop::quit); // never hang
        loop.exec();
        if (!explorer->searchResult())
            return "the search did not finish within 5 minutes";
        explorer->applyResult(0); // show the best layout, as a user clicking it would
    }

    if (auto* monitor = qobject_cast<MonitorPage*>(page))
        monitor->refreshNow();
    window.statusBar()->clearMessage();
    window.resize(r.size);
    window.show();
    QApplication::processEvents();
    // A picture of where the numbers are, not of an animation's first frame.
    for (Chart* chart : page->charts())
        chart->finishAnimations();
    QApplication::processEvents();
    if (window.size() != r.size)
        return QString("the window cannot be smaller than %1x%2: choose a larger --size")
            .arg(window.minimumSizeHint().width())
            .arg(window.minimumSizeHint().height());
    const QImage image = window.grab().toImage();
    QImageWriter writer(r.output, "png");
    if (!writer.write(image))
        return "cannot write " + r.output + ": " + writer.errorString();
    return {};
}

} // namespace shardscope
