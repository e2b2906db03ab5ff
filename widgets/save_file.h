// Writing a whole file so that a failure never leaves it half written: the bytes go to a
// temporary file that replaces the target only when everything was written.
#pragma once

#include <QByteArray>
#include <QString>

namespace shardscope {

// Returns an empty string on success, otherwise a message naming the file and the reason.
QString saveFileAtomically(const QString& path, const QByteArray& bytes);

} // namespace shardscope
