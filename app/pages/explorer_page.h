// Explorer: a model on a cluster with a layout. Live figures (memory, communication per axis,
// bubble, step-time breakdown, MFU, throughput, time and cost to train, training fraction under
// failures), the cluster map, and the search over all layouts with its table and scatter.
#pragma once

#include "cluster_map.h"
#include "page.h"
#include "search_worker.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QCheckBox;
class QSortFilterProxyModel;
class QStandardItemModel;
class QTabWidget;
class QTableView;

namespace shardscope {

class AnimatedBarChart;
class BreakdownBar;
class CalculatorPanel;
class LayoutScatter;
class MemoryChart;
class SessionForm;

class ExplorerPage : public Page {
    Q_OBJECT
public:
    ExplorerPage(SessionDocument* doc, QWidget* parent = nullptr);

    QString id() const override { return "explorer"; }
    QString title() const override { return "Explorer"; }
    std::vector<Chart*> charts() const override;
    std::vector<std::pair<QString, QAbstractItemModel*>> tables() const override;
    QString reportHtml() const override;
    bool showView(const QString& view) override; // "", "overview", "cluster", "search"
    QString viewsHelp() const override { return "overview, cluster, search"; }

    // Search: start with the current session; results arrive by signal.
    void startSearch();
    void cancelSearch();
    bool searchRunning() const { return worker_.isRunning(); }
    // Apply row `row` of the results table (view order) to the session.
    void applyResult(int row);
    SearchResultPtr searchResult() const { return result_; }

    CalculatorPanel* panel() const { return panel_; }
    SessionForm* form() const { return form_; }
    ClusterMap* clusterMap() const { return clusterMap_; }
    BreakdownBar* stepBreakdown() const { return stepBar_; }
    MemoryChart* memoryChart() const { return memoryChart_; }
    LayoutScatter* scatter() const { return scatter_; }
    QStandardItemModel* figures() const { return figures_; }
    QStandardItemModel* communication() const { return comm_; }
    QStandardItemModel* results() const { return results_; }
    AnimatedBarChart* layerChart() const { return layerChart_; }
    QStandardItemModel* layerOps() const { return layerOps_; }
    QTableView* resultsView() const { return resultsView_; }
    QProgressBar* searchProgress() const { return progress_; }

signals:
    void searchFinished(bool cancelled);

protected:
    void refresh() override;

private:
    void showResult(int serial, const SearchResultPtr& result);
    void applyCandidate(std::size_t index);
    QWidget* buildOverview();
    QWidget* buildClusterView();
    QWidget* buildSearchView();
    QWidget* buildLayerView();
    void showLayer(const PlanInputs& in);

    SessionDocument* doc_;
    CalculatorPanel* panel_;
    SessionForm* form_;
    QTabWidget* tabs_;
    QStandardItemModel* figures_;
    QStandardItemModel* comm_;
    BreakdownBar* stepBar_;
    MemoryChart* memoryChart_;
    ClusterMap* clusterMap_;
    QLabel* hoverLabel_;
    QLabel* mapWarning_;
    // Search
    SearchWorker worker_;
    int serial_ = 0;
    SearchResultPtr result_;
    QString searchSummary_; // the last search's counts, for the report
    QPushButton* searchButton_;
    QPushButton* cancelButton_;
    QProgressBar* progress_;
    QLabel* searchStatus_;
    QCheckBox* tpInNode_;
    QCheckBox* zeroBubble_;
    QStandardItemModel* results_;
    QSortFilterProxyModel* sorted_;
    QTableView* resultsView_;
    LayoutScatter* scatter_;
    // Inside a layer
    AnimatedBarChart* layerChart_;
    QStandardItemModel* layerOps_;
};

} // namespace shardscope
