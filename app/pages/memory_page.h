// Memory: how much each GPU holds for a model and a layout, by category, against its capacity;
// the verdict in words; and how memory per GPU falls with more GPUs under ZeRO 0-3.
#pragma once

#include "page.h"

class QStandardItemModel;
class QTableView;

namespace shardscope {

class CalculatorPanel;
class MemoryChart;
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

    CalculatorPanel* panel() const { return panel_; }
    SessionForm* form() const { return form_; }
    MemoryChart* memoryChart() const { return chart_; }
    SeriesChart* zeroChart() const { return zeroChart_; }
    QStandardItemModel* breakdown() const { return breakdown_; }

protected:
    void refresh() override;

private:
    SessionDocument* doc_;
    CalculatorPanel* panel_;
    SessionForm* form_;
    MemoryChart* chart_;
    SeriesChart* zeroChart_;
    QStandardItemModel* breakdown_;
    QTableView* table_;
};

} // namespace shardscope
