#include "main_window.h"

#include "chart.h"
#include "core/units.h"
#include "pages/collectives_page.h"
#include "pages/explorer_page.h"
#include "pages/memory_page.h"
#include "pages/monitor_page.h"
#include "pages/pipeline_page.h"
#include "report.h"
#include "table_export.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <nlohmann/json.hpp>
#include <qcustomplot.h>

// Resources of a static library must be registered by hand, outside any namespace.
static void initResources() {
    Q_INIT_RESOURCE(resources);
}

namespace shardscope {

namespace {
constexpr int kMaxRecent = 8;
const char* kSessionFilter = "Shardscope sessions (*.shardscope)";
} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), sidebar_(new QListWidget), stack_(new QStackedWidget),
      summary_(new QLabel), validity_(new QLabel) {
    initResources();
    setAcceptDrops(true);
    setWindowIcon(QIcon(":/shardscope/shardscope.svg"));
    pages_ = {new MemoryPage(&doc_), new ExplorerPage(&doc_), new PipelinePage(&doc_),
              new CollectivesPage(&doc_), new MonitorPage(&doc_)};
    for (Page* p : pages_) {
        sidebar_->addItem(p->title());
        stack_->addWidget(p);
        connect(p, &Page::importModelRequested, this, &MainWindow::importDialog);
    }
    for (int i = 0; i < sidebar_->count(); ++i)
        sidebar_->item(i)->setSizeHint(QSize(0, 36));
    sidebar_->setFixedWidth(std::max(120, sidebar_->sizeHintForColumn(0) + 40));
    sidebar_->setObjectName("sidebar");
    connect(sidebar_, &QListWidget::currentRowChanged, this, [this](int row) {
        stack_->setCurrentIndex(row);
        rebuildExportMenus();
    });

    auto* central = new QWidget;
    auto* row = new QHBoxLayout(central);
    row->setContentsMargins(0, 0, 0, 0);
    row->setSpacing(0);
    row->addWidget(sidebar_);
    row->addWidget(stack_, 1);
    setCentralWidget(central);

    statusBar()->addWidget(summary_, 1);
    statusBar()->addPermanentWidget(validity_);
    buildMenus();

    connect(&doc_, &SessionDocument::changed, this, &MainWindow::updateStatus);
    connect(&doc_, &SessionDocument::filePathChanged, this, &MainWindow::updateTitle);
    connect(doc_.undoStack(), &QUndoStack::cleanChanged, this, &MainWindow::updateTitle);
    connect(&loader_, &FileLoader::loaded, this, [this](const LoadedFile& f) {
        const QString error = applyLoadedFile(f);
        if (!error.isEmpty())
            showError("Cannot open " + QFileInfo(f.path).fileName(), error);
        emit fileHandled(error);
    });

    QSettings settings;
    restoreGeometry(settings.value("window/geometry").toByteArray());
    restoreState(settings.value("window/state").toByteArray());
    if (!settings.contains("window/geometry"))
        resize(1440, 900);
    setTheme(themeFromString(settings.value("view/theme").toString()));
    sidebar_->setCurrentRow(0);
    updateTitle();
    updateStatus();
}

Page* MainWindow::page(const QString& id) const {
    for (Page* p : pages_) {
        if (p->id() == id)
            return p;
    }
    return nullptr;
}

Page* MainWindow::currentPage() const {
    return qobject_cast<Page*>(stack_->currentWidget());
}

bool MainWindow::showPage(const QString& id) {
    for (std::size_t i = 0; i < pages_.size(); ++i) {
        if (pages_[i]->id() == id) {
            sidebar_->setCurrentRow(int(i));
            return true;
        }
    }
    return false;
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu("&File");
    file->addAction("&New session", QKeySequence::New, this, &MainWindow::newSession);
    file->addAction("&Open...", QKeySequence::Open, this, &MainWindow::openDialog);
    recentMenu_ = file->addMenu("Open &recent");
    file->addAction("&Save", QKeySequence::Save, this, &MainWindow::save);
    file->addAction("Save &as...", QKeySequence::SaveAs, this, &MainWindow::saveAsDialog);
    file->addSeparator();
    file->addAction("&Import Hugging Face config.json...", QKeySequence(Qt::CTRL | Qt::Key_I), this,
                    &MainWindow::importDialog);
    file->addAction("Open run &directory...", QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), this,
                    [this] {
                        showPage("monitor");
                        qobject_cast<MonitorPage*>(page("monitor"))->chooseRunDirectory(false);
                    });
    file->addAction("Compare with run directory...", this, [this] {
        showPage("monitor");
        qobject_cast<MonitorPage*>(page("monitor"))->chooseRunDirectory(true);
    });
    file->addSeparator();
    exportChartMenu_ = file->addMenu("Export &chart");
    exportTableMenu_ = file->addMenu("Export &table as CSV");
    file->addAction("Export &report (HTML or PDF)...", QKeySequence(Qt::CTRL | Qt::Key_E), this,
                    &MainWindow::exportReportDialog);
    file->addSeparator();
    file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);

    QMenu* edit = menuBar()->addMenu("&Edit");
    QAction* undo = doc_.undoStack()->createUndoAction(this, "&Undo");
    undo->setShortcut(QKeySequence::Undo);
    QAction* redo = doc_.undoStack()->createRedoAction(this, "&Redo");
    redo->setShortcut(QKeySequence::Redo);
    edit->addAction(undo);
    edit->addAction(redo);

    QMenu* view = menuBar()->addMenu("&View");
    for (std::size_t i = 0; i < pages_.size(); ++i) {
        const Page* p = pages_[i];
        view->addAction(p->title(), QKeySequence(Qt::CTRL | Qt::Key(Qt::Key_1 + int(i))), this,
                        [this, i] { sidebar_->setCurrentRow(int(i)); });
    }
    view->addSeparator();
    // One theme is on at a time, and the menu shows which.
    QMenu* theme = view->addMenu("&Theme");
    auto* themes = new QActionGroup(theme);
    for (Theme t : {Theme::System, Theme::Light, Theme::Dark}) {
        const QString name = toString(t);
        QAction* a = theme->addAction(name.left(1).toUpper() + name.mid(1), this,
                                      [this, t] { setTheme(t); });
        a->setObjectName("theme-" + name);
        a->setCheckable(true);
        themes->addAction(a);
    }

    QMenu* help = menuBar()->addMenu("&Help");
    help->addAction("&About Shardscope", this, &MainWindow::about);
    help->addAction("About &Qt", qApp, &QApplication::aboutQt);
    rebuildRecentMenu();
}

void MainWindow::rebuildExportMenus() {
    if (!exportChartMenu_ || !currentPage())
        return;
    exportChartMenu_->clear();
    for (Chart* chart : currentPage()->charts()) {
        exportChartMenu_->addAction(chart->title() + "...", this, [this, chart] {
            const QString path = QFileDialog::getSaveFileName(
                this, "Export " + chart->title(), chart->title() + ".png",
                "PNG image (*.png);;SVG image (*.svg);;PDF document (*.pdf)");
            if (path.isEmpty())
                return;
            reportSaved(path, exportChart(*chart, path));
        });
    }
    exportTableMenu_->clear();
    for (const auto& [name, model] : currentPage()->tables()) {
        exportTableMenu_->addAction(name + "...", this, [this, name = name, model = model] {
            const QString path =
                QFileDialog::getSaveFileName(this, "Export " + name, name + ".csv", "CSV (*.csv)");
            if (path.isEmpty())
                return;
            reportSaved(path, exportCsv(*model, path));
        });
    }
}

void MainWindow::reportSaved(const QString& path, const QString& error) {
    if (!error.isEmpty())
        showError("Export failed", error);
    else
        statusBar()->showMessage("Saved " + path, 5000);
}

void MainWindow::updateTitle() {
    const QString name =
        doc_.filePath().isEmpty() ? "Untitled" : QFileInfo(doc_.filePath()).fileName();
    setWindowTitle(name + "[*] - Shardscope");
    setWindowModified(doc_.isModified());
}

void MainWindow::updateStatus() {
    const Session& s = doc_.session();
    const Estimate& e = doc_.estimate();
    summary_->setText(QString("%1 on %2 x %3 | %4 | %5 per GPU | MFU %6")
                          .arg(QString::fromStdString(s.model.name))
                          .arg(s.cluster.worldSize())
                          .arg(QString::fromStdString(s.cluster.gpu.name),
                               QString::fromStdString(layoutSummary(s.parallel)),
                               QString::fromStdString(formatBytes(e.memory.total())),
                               QString::fromStdString(formatPercent(e.mfu))));
    validity_->setText(e.valid() ? (e.fits ? "valid, fits" : "does not fit")
                                 : QString("%1 layout problem(s)").arg(e.violations.size()));
    // Exported charts say what they show.
    const QString caption = QString("%1 on %2 x %3, %4")
                                .arg(QString::fromStdString(s.model.name))
                                .arg(s.cluster.worldSize())
                                .arg(QString::fromStdString(s.cluster.gpu.name),
                                     QString::fromStdString(layoutSummary(s.parallel)));
    for (Page* page : pages_) {
        const QString text = page->chartCaption(caption);
        for (Chart* chart : page->charts())
            chart->setCaption(text);
    }
}

void MainWindow::showError(const QString& title, const QString& message) {
    statusBar()->showMessage(message, 10000);
    if (!quiet_)
        QMessageBox::warning(this, title, message);
}

QString MainWindow::applyLoadedFile(const LoadedFile& f) {
    if (!f.error.isEmpty())
        return f.error;
    if (f.session) {
        doc_.reset(*f.session, f.path);
        showPage(QString::fromStdString(f.session->page));
        rememberRecent(f.path);
        statusBar()->showMessage("Opened " + f.path, 5000);
        return {};
    }
    if (f.model) {
        const ModelSpec model = *f.model;
        doc_.edit("Import " + QFileInfo(f.path).fileName(), [&](Session& s) {
            s.model = model;
            s.modelSource = ModelSource::HuggingFace;
            s.modelOrigin = f.path.toStdString();
        });
        statusBar()->showMessage(
            "Imported " + QString::fromStdString(model.name) + " from " + f.path, 5000);
        return {};
    }
    return f.path + ": nothing to load";
}

QString MainWindow::openRun(const QString& dir, bool compare) {
    auto* monitor = qobject_cast<MonitorPage*>(page("monitor"));
    const QString error = compare ? monitor->compareRun(dir) : monitor->openRun(dir);
    if (error.isEmpty()) {
        showPage("monitor");
        statusBar()->showMessage((compare ? "Comparing with " : "Opened run ") + dir, 5000);
    }
    return error;
}

void MainWindow::openFile(const QString& path) {
    statusBar()->showMessage("Reading " + path + "...");
    loader_.load(path);
}

QString MainWindow::saveSessionAs(const QString& path) {
    Session session = doc_.session();
    if (currentPage())
        session.page = currentPage()->id().toStdString(); // reopen where the user was
    try {
        saveSession(session, path.toStdString());
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    doc_.setFilePath(path);
    doc_.markSaved();
    rememberRecent(path);
    statusBar()->showMessage("Saved " + path, 5000);
    return {};
}

QString MainWindow::exportReportTo(const QString& path) {
    return exportReport(doc_, pages_, path);
}

QStringList MainWindow::recentFiles() const {
    return QSettings().value("session/recent").toStringList();
}

void MainWindow::rememberRecent(const QString& path) {
    QStringList recent = recentFiles();
    const QString abs = QFileInfo(path).absoluteFilePath();
    recent.removeAll(abs);
    recent.prepend(abs);
    while (recent.size() > kMaxRecent)
        recent.removeLast();
    QSettings().setValue("session/recent", recent);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
    recentMenu_->clear();
    const QStringList recent = recentFiles();
    for (const QString& path : recent)
        recentMenu_->addAction(path, this, [this, path] {
            if (maybeSave())
                openFile(path);
        });
    recentMenu_->setEnabled(!recent.isEmpty());
}

bool MainWindow::maybeSave() {
    if (!doc_.isModified() || quiet_)
        return true;
    const auto answer =
        QMessageBox::question(this, "Unsaved changes", "Save the changes to this session first?",
                              QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
    if (answer == QMessageBox::Save)
        return save();
    return answer == QMessageBox::Discard;
}

void MainWindow::newSession() {
    if (maybeSave())
        doc_.reset(defaultSession());
}

void MainWindow::openDialog() {
    if (!maybeSave())
        return;
    const QString path = QFileDialog::getOpenFileName(this, "Open session", {},
                                                      QString(kSessionFilter) + ";;All files (*)");
    if (!path.isEmpty())
        openFile(path);
}

void MainWindow::importDialog() {
    const QString path = QFileDialog::getOpenFileName(this, "Import a Hugging Face config.json", {},
                                                      "Model configs (*.json);;All files (*)");
    if (!path.isEmpty())
        openFile(path);
}

bool MainWindow::save() {
    if (doc_.filePath().isEmpty())
        return saveAsDialog();
    const QString error = saveSessionAs(doc_.filePath());
    if (!error.isEmpty())
        showError("Save failed", error);
    return error.isEmpty();
}

bool MainWindow::saveAsDialog() {
    QString path =
        QFileDialog::getSaveFileName(this, "Save session", "plan.shardscope", kSessionFilter);
    if (path.isEmpty())
        return false;
    if (QFileInfo(path).suffix().isEmpty())
        path += ".shardscope";
    const QString error = saveSessionAs(path);
    if (!error.isEmpty())
        showError("Save failed", error);
    return error.isEmpty();
}

void MainWindow::exportReportDialog() {
    const QString path = QFileDialog::getSaveFileName(this, "Export report", "plan-report.html",
                                                      "HTML (*.html);;PDF (*.pdf)");
    if (path.isEmpty())
        return;
    reportSaved(path, exportReportTo(path));
}

QString MainWindow::aboutText() {
    return QString("<h3>Shardscope %1</h3><p>A workbench for distributed training of large "
                   "language models.</p><p>Qt %2 (built with %3), QCustomPlot %4, nlohmann-json "
                   "%5.%6.%7, %8</p><p>GPL-3.0-or-later.</p>")
        .arg(SHARDSCOPE_VERSION, qVersion(), QT_VERSION_STR, QCUSTOMPLOT_VERSION_STR)
        .arg(NLOHMANN_JSON_VERSION_MAJOR)
        .arg(NLOHMANN_JSON_VERSION_MINOR)
        .arg(NLOHMANN_JSON_VERSION_PATCH)
        .arg(
#if defined(__clang__)
            "clang " __clang_version__
#elif defined(__GNUC__)
            "GCC " __VERSION__
#else
            "unknown compiler"
#endif
        );
}

void MainWindow::about() {
    QMessageBox::about(this, "About Shardscope", aboutText());
}

void MainWindow::setTheme(Theme t) {
    applyTheme(t);
    QSettings().setValue("view/theme", toString(t));
    if (auto* action = findChild<QAction*>("theme-" + toString(t)))
        action->setChecked(true);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasUrls())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.isEmpty() || !urls.first().isLocalFile())
        return;
    event->acceptProposedAction();
    openFile(urls.first().toLocalFile());
}

void MainWindow::closeEvent(QCloseEvent* event) {
    if (!maybeSave()) {
        event->ignore();
        return;
    }
    // A job this app started on this machine or over ssh ends with it (a Slurm job runs on).
    using State = RunController::State;
    const RunController* run = qobject_cast<MonitorPage*>(page("monitor"))->controller();
    const bool active = run->state() == State::Starting || run->state() == State::Running ||
                        run->state() == State::Stopping;
    if (!quiet_ && active && run->slurmJob().isEmpty() &&
        QMessageBox::question(this, "A run is in progress",
                              "The training run this window started ends when it closes. Stop "
                              "it first (it writes a checkpoint) to resume it later. Close "
                              "anyway?") != QMessageBox::Yes) {
        event->ignore();
        return;
    }
    QSettings settings;
    settings.setValue("window/geometry", saveGeometry());
    settings.setValue("window/state", saveState());
    event->accept();
}

} // namespace shardscope
