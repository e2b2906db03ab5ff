// Tables to CSV (RFC 4180: quoted when needed, CRLF line ends, header row from the model's
// horizontal headers).
#pragma once

#include <QString>

class QAbstractItemModel;

namespace shardscope {

// Every row of the model (display role), header first.
QString tableToCsv(const QAbstractItemModel& model);
// Write tableToCsv to `path`; returns an empty string on success, otherwise a message.
QString exportCsv(const QAbstractItemModel& model, const QString& path);

} // namespace shardscope
