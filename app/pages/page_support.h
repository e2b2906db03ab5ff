// Small helpers the pages share for turning planner output into Qt text.
#pragma once

#include "plan/explain.h"
#include "plan/memory_summary.h"

#include <QList>
#include <QString>
#include <QStringList>
#include <vector>

class QStandardItem;
class QStandardItemModel;
class QAbstractItemModel;
class QTableView;

namespace shardscope {

inline QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

// "formula\n= substituted\nsource", the tooltip every figure carries.
QString explanationTooltip(const Explanation& e);
std::vector<Explanation> explainAll(const PlanInputs& in, const Estimate& e,
                                    const std::vector<FigureId>& ids);
// Layout problems as an HTML list with their fix hints; empty when none.
QString violationsHtml(const std::vector<Violation>& violations);
// An item showing text, sorting by `sortValue`, with a tooltip.
QStandardItem* figureItem(const QString& text, double sortValue, const QString& tooltip = {});

// Replace a table's contents. When the shape is unchanged the existing items are updated in
// place, so views keep their column widths, sorting and scroll position and skip a full relayout.
void setRows(QStandardItemModel* model, const QStringList& headers,
             std::vector<QList<QStandardItem*>> rows);

// A read-only table of whole rows without a row header, the last column stretched.
QTableView* makeTable(QAbstractItemModel* model);
// A table as HTML for reports: header row, then the first `maxRows` rows' display text (all by
// default), with a line saying how many more there are.
QString tableHtml(const QAbstractItemModel& model, int maxRows = -1);

} // namespace shardscope
