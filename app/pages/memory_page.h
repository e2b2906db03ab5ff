// Memory: how much each GPU holds for a model and a layout, by category, against its capacity;
// the verdict in words; how memory per GPU falls with more GPUs under ZeRO 0-3; what each GPU
// of a data-parallel group holds of the model state (its own shard and the copies ZeRO removes);
// and each category's share, which turn to their new sizes as the layout changes.
#pragma once

#include "page.h"

class QStandardItemModel;
class QTableView;
class QTabWidget;

namespace shardscope {

class AnimatedBarChart;
class CalculatorPanel;
class MemoryChart;
class ShareChart;
class SeriesChart;
class SessionForm;

class MemoryPage : public Page {
    Q_OBJECT
public:
    MemoryPage(SessionDocument* doc, QWidget* parent = nullptr);

    QString id() const override { return "memory"; }
    QString title() const override { return "Memory"; }
    std::vector<Chart*> charts() const override;
    std::vector<std::pair<QString, QAbstractItemModel*>> tables() const override;
    QString reportHtml() const override;
    bool showView(const QString& view) override; // "holdings", "share", "breakdown"
    QString viewsHelp() const override;

    CalculatorPanel* panel() const { return panel_; }
    SessionForm* form() const { return form_; }
    MemoryChart* memoryChart() const { return chart_; }
    SeriesChart* zeroChart() const { return zeroChart_; }
    AnimatedBarChart* holdingsChart() const { return holdings_; }
    ShareChart* shareChart() const { return share_; }
    QStandardItemModel* breakdown() const { return breakdown_; }

protected:
    void refresh() override;

private:
    SessionDocument* doc_;
    CalculatorPanel* panel_;
    SessionForm* form_;
    MemoryChart* chart_;
    SeriesChart* zeroChart_;
    AnimatedBarChart* holdings_;
    ShareChart* share_;
    QStandardItemModel* breakdown_;
    QTableView* table_;
    QTabWidget* tabs_;
};

} // namespace shardscope
