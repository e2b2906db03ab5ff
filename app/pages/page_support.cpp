#include "page_support.h"

#include <QHeaderView>
#include <QStandardItemModel>
#include <QTableView>
#include <algorithm>

namespace shardscope {

QString explanationTooltip(const Explanation& e) {
    return QString("<b>%1 = %2</b><br><tt>%3</tt><br><tt>= %4</tt><br><i>%5</i>")
        .arg(qs(e.label).toHtmlEscaped(), qs(e.display).toHtmlEscaped(),
             qs(e.formula).toHtmlEscaped(), qs(e.substituted).toHtmlEscaped(),
             qs(e.source).toHtmlEscaped());
}

std::vector<Explanation> explainAll(const PlanInputs& in, const Estimate& e,
                                    const std::vector<FigureId>& ids) {
    std::vector<Explanation> out;
    out.reserve(ids.size());
    for (FigureId id : ids)
        out.push_back(explain(in, e, id));
    return out;
}

QString violationsHtml(const std::vector<Violation>& violations) {
    if (violations.empty())
        return {};
    QString html = "<ul style='margin:0'>";
    for (const Violation& v : violations)
        html += QString("<li><b>%1</b>: %2 <i>Fix: %3</i></li>")
                    .arg(qs(v.rule).toHtmlEscaped(), qs(v.message).toHtmlEscaped(),
                         qs(v.hint).toHtmlEscaped());
    return html + "</ul>";
}

QStandardItem* figureItem(const QString& text, double sortValue, const QString& tooltip) {
    auto* item = new QStandardItem(text);
    item->setData(sortValue, Qt::UserRole);
    item->setToolTip(tooltip);
    item->setEditable(false);
    return item;
}

void setRows(QStandardItemModel* model, const QStringList& headers,
             std::vector<QList<QStandardItem*>> rows) {
    const bool sameShape =
        model->rowCount() == int(rows.size()) && model->columnCount() == int(headers.size());
    if (!sameShape) {
        model->clear();
        model->setHorizontalHeaderLabels(headers);
        for (auto& row : rows)
            model->appendRow(row);
        return;
    }
    for (int r = 0; r < int(rows.size()); ++r) {
        for (int c = 0; c < int(rows[std::size_t(r)].size()); ++c) {
            QStandardItem* fresh = rows[std::size_t(r)][c];
            QStandardItem* item = model->item(r, c);
            if (item->text() != fresh->text())
                item->setText(fresh->text());
            if (item->data(Qt::UserRole) != fresh->data(Qt::UserRole))
                item->setData(fresh->data(Qt::UserRole), Qt::UserRole);
            if (item->toolTip() != fresh->toolTip())
                item->setToolTip(fresh->toolTip());
            delete fresh;
        }
    }
}

QTableView* makeTable(QAbstractItemModel* model) {
    auto* view = new QTableView;
    view->setModel(model);
    view->verticalHeader()->hide();
    view->horizontalHeader()->setStretchLastSection(true);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    return view;
}

QString tableHtml(const QAbstractItemModel& m, int maxRows) {
    QString html = "<table border=\"1\" cellspacing=\"0\" cellpadding=\"3\"><tr>";
    for (int c = 0; c < m.columnCount(); ++c)
        html += "<th>" + m.headerData(c, Qt::Horizontal).toString().toHtmlEscaped() + "</th>";
    html += "</tr>";
    const int rows = maxRows < 0 ? m.rowCount() : std::min(maxRows, m.rowCount());
    for (int r = 0; r < rows; ++r) {
        html += "<tr>";
        for (int c = 0; c < m.columnCount(); ++c)
            html += "<td>" + m.data(m.index(r, c)).toString().toHtmlEscaped() + "</td>";
        html += "</tr>";
    }
    html += "</table>";
    if (rows < m.rowCount())
        html += QString("<p><small>%1 more rows not shown.</small></p>").arg(m.rowCount() - rows);
    return html;
}

} // namespace shardscope
