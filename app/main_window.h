// The main window: a sidebar of pages, menus, shortcuts, a status bar, sessions (new, open,
// recent, save), drag and drop of sessions and config.json files, exports and the report.
#pragma once

#include "file_loader.h"
#include "session_document.h"
#include "theme.h"

#include <QMainWindow>
#include <vector>

class QLabel;
class QListWidget;
class QMenu;
class QStackedWidget;

namespace shardscope {

class Page;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    SessionDocument* document() { return &doc_; }
    const std::vector<Page*>& pages() const { return pages_; }
    Page* page(const QString& id) const;
    Page* currentPage() const;
    bool showPage(const QString& id); // false when there is no such page

    // Open a session or import a config.json on a worker thread; fileHandled() follows with an
    // empty string or the error (also shown to the user unless quiet).
    void openFile(const QString& path);
    // Apply a file read by loadFile (what openFile does when the worker is done).
    QString applyLoadedFile(const LoadedFile& file);
    QString saveSessionAs(const QString& path);
    // A training run's directory on the Monitor page (replayed from its files), or beside the
    // run shown there; the error or "".
    QString openRun(const QString& dir, bool compare = false);
    QString exportReportTo(const QString& path);
    QStringList recentFiles() const;
    static QString aboutText(); // the About box: versions of Shardscope and its libraries

    // No message boxes (tests and the headless renderer): errors only go to fileHandled() and
    // the status bar, and closing never asks to save.
    void setQuiet(bool quiet) { quiet_ = quiet; }

signals:
    void fileHandled(const QString& error);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void updateTitle();
    void updateStatus();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    void rebuildExportMenus();
    void showError(const QString& title, const QString& message);
    void reportSaved(const QString& path, const QString& error); // after an export
    bool maybeSave();
    void newSession();
    void openDialog();
    void importDialog();
    bool save();
    bool saveAsDialog();
    void exportReportDialog();
    void about();
    void setTheme(Theme t);

    SessionDocument doc_;
    FileLoader loader_;
    QListWidget* sidebar_;
    QStackedWidget* stack_;
    std::vector<Page*> pages_;
    QLabel* summary_;
    QLabel* validity_;
    QMenu* recentMenu_ = nullptr;
    QMenu* exportChartMenu_ = nullptr;
    QMenu* exportTableMenu_ = nullptr;
    bool quiet_ = false;
};

} // namespace shardscope
