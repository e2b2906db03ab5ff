// Reads a dropped or opened file on a worker thread: a .shardscope session or a Hugging Face
// config.json, told apart by content. The result comes back to the GUI thread by signal.
#pragma once

#include "session.h"

#include <QObject>
#include <QString>
#include <optional>

namespace shardscope {

struct LoadedFile {
    QString path;
    std::optional<Session> session; // a .shardscope file
    std::optional<ModelSpec> model; // a Hugging Face config.json
    QString error;                  // what was wrong, when neither
};

// Synchronous: what the worker runs (and what the headless renderer and tests call directly).
LoadedFile loadFile(const QString& path);

class FileLoader : public QObject {
    Q_OBJECT
public:
    using QObject::QObject;
    void load(const QString& path); // returns at once; loaded() follows

signals:
    void loaded(const shardscope::LoadedFile& file);
};

} // namespace shardscope

Q_DECLARE_METATYPE(shardscope::LoadedFile)
