// FileLoader: sessions and config.json files told apart by content, errors that name the file,
// and the read done on a worker thread.
#include "file_loader.h"

#include <QDir>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

using namespace shardscope;

namespace {
QString write(const QTemporaryDir& dir, const QString& name, const QByteArray& text) {
    const QString path = QDir(dir.path()).filePath(name);
    QFile f(path);
    f.open(QIODevice::WriteOnly);
    f.write(text);
    return path;
}
} // namespace

class TestFileLoader : public QObject {
    Q_OBJECT
private slots:
    void readsASession() {
        QTemporaryDir dir;
        const QString path = QDir(dir.path()).filePath("s.shardscope");
        saveSession(defaultSession(), path.toStdString());
        const LoadedFile f = loadFile(path);
        QVERIFY2(f.error.isEmpty(), qPrintable(f.error));
        QVERIFY(f.session.has_value());
        QVERIFY(!f.model.has_value());
    }

    void readsAHuggingFaceConfig() {
        const LoadedFile f = loadFile(SHARDSCOPE_TEST_DATA "/hf/gpt2.json");
        QVERIFY2(f.error.isEmpty(), qPrintable(f.error));
        QVERIFY(f.model.has_value());
        QCOMPARE(countParameters(*f.model).total, std::int64_t(124439808));
    }

    void errorsNameTheFileAndTheProblem() {
        QTemporaryDir dir;
        const struct {
            QByteArray text;
            const char* expected;
        } cases[] = {
            {"{ broken", "broken.json"},
            {"{\"hello\": 1}", "neither a Shardscope session"},
            {"{\"model_type\": \"llama\", \"hidden_size\": -5}", "hidden_size"},
            {"{\"format\": \"shardscope-session\", \"version\": 99}", "newer Shardscope"},
        };
        for (const auto& c : cases) {
            const QString path = write(dir, "broken.json", c.text);
            const LoadedFile f = loadFile(path);
            QVERIFY(!f.session && !f.model);
            QVERIFY2(f.error.contains(c.expected), qPrintable(f.error));
            QVERIFY2(f.error.contains(path) || f.error.contains("broken.json"),
                     qPrintable(f.error));
        }
        QVERIFY(loadFile(dir.path()).error.contains("directory"));
        QVERIFY(loadFile(dir.path() + "/missing.json").error.contains("missing.json"));
    }

    void loadsOnAWorkerThread() {
        FileLoader loader;
        QSignalSpy loaded(&loader, &FileLoader::loaded);
        loader.load(SHARDSCOPE_TEST_DATA "/hf/llama-3-8b.json");
        QVERIFY(loaded.wait(10000));
        const auto f = loaded.first().first().value<LoadedFile>();
        QVERIFY2(f.model.has_value(), qPrintable(f.error));
        QCOMPARE(f.model->layers, 32);
    }
};

QTEST_MAIN(TestFileLoader)
#include "test_file_loader.moc"
