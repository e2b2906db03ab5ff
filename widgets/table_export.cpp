#include "table_export.h"

#include "save_file.h"

#include <QAbstractItemModel>
#include <QStringList>

namespace shardscope {

namespace {

// RFC 4180: a field is quoted when it holds a comma, a quote or a line break; quotes double.
QString csvField(const QString& value) {
    static const QString special = QStringLiteral(",\"\r\n");
    bool quote = false;
    for (QChar c : value)
        quote = quote || special.contains(c);
    if (!quote)
        return value;
    QString out = value;
    out.replace(QLatin1Char('"'), QStringLiteral("\"\""));
    return QLatin1Char('"') + out + QLatin1Char('"');
}

} // namespace

QString tableToCsv(const QAbstractItemModel& model) {
    const int rows = model.rowCount(), cols = model.columnCount();
    QString csv;
    QStringList fields;
    for (int c = 0; c < cols; ++c)
        fields << csvField(model.headerData(c, Qt::Horizontal, Qt::DisplayRole).toString());
    csv += fields.join(QLatin1Char(',')) + QStringLiteral("\r\n");
    for (int r = 0; r < rows; ++r) {
        fields.clear();
        for (int c = 0; c < cols; ++c)
            fields << csvField(model.data(model.index(r, c), Qt::DisplayRole).toString());
        csv += fields.join(QLatin1Char(',')) + QStringLiteral("\r\n");
    }
    return csv;
}

QString exportCsv(const QAbstractItemModel& model, const QString& path) {
    return saveFileAtomically(path, tableToCsv(model).toUtf8());
}

} // namespace shardscope
