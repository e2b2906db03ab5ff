// One page of the main window. Pages read the SessionDocument and draw; the window asks them for
// their charts and tables (export) and for their part of the report.
#pragma once

#include "chart.h"

#include <QWidget>
#include <utility>
#include <vector>

class QAbstractItemModel;
class QComboBox;

namespace shardscope {

class SessionDocument;

class Page : public QWidget {
    Q_OBJECT
public:
    using QWidget::QWidget;

    virtual QString id() const = 0;    // "memory": used by sessions and --render
    virtual QString title() const = 0; // "Memory"
    virtual std::vector<Chart*> charts() const = 0;
    virtual std::vector<std::pair<QString, QAbstractItemModel*>> tables() const = 0;
    // This page's section of the report: HTML with <img src="chart:N"> for charts()[N].
    virtual QString reportHtml() const = 0;
    // What this page's charts show, for the caption under an exported chart: by default the
    // session (`session`: its model, cluster and layout); lessons of their own say theirs.
    virtual QString chartCaption(const QString& session) const { return session; }
    // Sub-views ("cluster", "search") for --render explorer/cluster; false when unknown.
    virtual bool showView(const QString& view) { return view.isEmpty(); }
    // The sub-views showView takes, for the error that names a wrong one.
    virtual QString viewsHelp() const { return "none"; }

    // Bring the page up to date with the session now (exports and reports read hidden pages).
    void ensureFresh() {
        if (stale_) {
            stale_ = false;
            refresh();
        }
    }

signals:
    void importModelRequested(); // the model picker's "Open Hugging Face config.json..."

protected:
    // The model picker's "Open Hugging Face config.json..." item asks the window to import.
    void forwardImportRequests(QComboBox* modelPicker);
    // Rebuild every figure from the document.
    virtual void refresh() = 0;
    // Connected to SessionDocument::changed: a hidden page only notes that it is stale and
    // catches up when shown, so an edit costs one page's redraw, not every page's.
    void sessionChanged() {
        stale_ = true;
        if (isVisible())
            ensureFresh();
    }
    void showEvent(QShowEvent* event) override {
        ensureFresh();
        QWidget::showEvent(event);
    }

private:
    bool stale_ = false;
};

} // namespace shardscope
