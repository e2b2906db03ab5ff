#include "file_loader.h"

#include "core/error.h"
#include "core/json_io.h"

#include <QFileInfo>
#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>
#include <nlohmann/json.hpp>

namespace shardscope {

namespace {
// Session files and model configs are a few kB; anything this large is not one of them.
constexpr qint64 kMaxFileBytes = 64 * 1024 * 1024;
} // namespace

LoadedFile loadFile(const QString& path) {
    LoadedFile out;
    out.path = path;
    const QFileInfo info(path);
    if (info.exists() && info.size() > kMaxFileBytes) {
        out.error = QString("%1 is %2 MB: too large for a session or a config.json")
                        .arg(path)
                        .arg(info.size() / (1024 * 1024));
        return out;
    }
    try {
        const nlohmann::json j = readJsonFile(path.toStdString());
        if (j.is_object() && j.contains("format")) {
            out.session = sessionFromJson(j);
        } else if (j.is_object() && (j.contains("model_type") || j.contains("hidden_size") ||
                                     j.contains("n_embd"))) {
            out.model = modelFromHuggingFace(j, huggingFaceModelName(j, path.toStdString()));
        } else {
            out.error = path + ": neither a Shardscope session (no \"format\") nor a Hugging Face "
                               "config.json (no \"model_type\" or \"hidden_size\")";
        }
    } catch (const InputError& e) {
        const QString what = QString::fromStdString(e.what());
        out.error = what.contains(path) ? what : path + ": " + what;
    } catch (const std::exception& e) {
        out.error = path + ": " + QString::fromStdString(e.what());
    }
    return out;
}

void FileLoader::load(const QString& path) {
    qRegisterMetaType<LoadedFile>("shardscope::LoadedFile");
    auto* watcher = new QFutureWatcher<LoadedFile>(this);
    connect(watcher, &QFutureWatcher<LoadedFile>::finished, this, [this, watcher] {
        emit loaded(watcher->result());
        watcher->deleteLater();
    });
    watcher->setFuture(QtConcurrent::run(loadFile, path));
}

} // namespace shardscope
