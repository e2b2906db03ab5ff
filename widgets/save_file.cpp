#include "save_file.h"

#include <QObject>
#include <QSaveFile>

namespace shardscope {

QString saveFileAtomically(const QString& path, const QByteArray& bytes) {
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        return QObject::tr("cannot write %1: %2").arg(path, file.errorString());
    if (file.write(bytes) != bytes.size() || !file.commit())
        return QObject::tr("cannot write %1: %2").arg(path, file.errorString());
    return {};
}

} // namespace shardscope
