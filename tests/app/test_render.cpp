// `shardscope --render`: a PNG of each page with no display, and clear errors for bad input.
#include <QDir>
#include <QImage>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace {
struct Run {
    int code;
    QString err;
};

Run render(const QStringList& args) {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("QT_QPA_PLATFORM"); // --render must pick offscreen on its own
    env.insert("XDG_CONFIG_HOME", QDir::tempPath() + "/shardscope-render-test");
    p.setProcessEnvironment(env);
    p.start(SHARDSCOPE_APP, QStringList{"--render"} + args);
    if (!p.waitForFinished(120000))
        return {-1, "timed out"};
    return {p.exitCode(), QString::fromUtf8(p.readAllStandardError())};
}
} // namespace

class TestRender : public QObject {
    Q_OBJECT
private slots:
    void rendersEveryPage() {
        QTemporaryDir dir;
        for (const QString page : {"memory", "explorer", "explorer/cluster", "explorer/search",
                                   "pipeline", "collectives", "monitor"}) {
            const QString out = QDir(dir.path()).filePath(QString(page).replace('/', '-') + ".png");
            const Run r = render({page, "-o", out, "--size", "1500x900"});
            QVERIFY2(r.code == 0, qPrintable(page + ": " + r.err));
            const QImage image(out);
            QVERIFY2(!image.isNull(), qPrintable(out));
            QCOMPARE(image.size(), QSize(1500, 900));
        }
    }

    void rendersASessionFile() {
        QTemporaryDir dir;
        const QString session = QDir(dir.path()).filePath("s.shardscope");
        QFile f(session);
        QVERIFY(f.open(QIODevice::WriteOnly));
        QFile source(SHARDSCOPE_SOURCE_DIR "/docs/sessions/llama3-405b.shardscope");
        QVERIFY2(source.open(QIODevice::ReadOnly), "docs/sessions/llama3-405b.shardscope");
        f.write(source.readAll());
        f.close();
        const QString out = QDir(dir.path()).filePath("o.png");
        const Run r = render({"explorer/cluster", "--session", session, "-o", out});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        QCOMPARE(QImage(out).size(), QSize(1600, 1000));
    }

    void rendersARunDirectoryOnTheMonitorAtAnyMoment() {
        QTemporaryDir dir;
        QDir(dir.path()).mkpath("run/telemetry");
        for (int rank = 0; rank < 2; ++rank) {
            QFile f(QString("%1/run/telemetry/rank-%2.jsonl").arg(dir.path()).arg(rank));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(
                QString("{\"type\":\"event\",\"event\":\"start\",\"rank\":%1,\"t\":0,"
                        "\"wall_clock\":1.7e9,\"coord\":{\"dp\":%1,\"tp\":0,\"pp\":0,\"cp\":0}}\n")
                    .arg(rank)
                    .toUtf8());
            for (int step = 1; step <= 10; ++step)
                f.write(QString("{\"type\":\"step\",\"rank\":%1,\"step\":%2,\"t\":%2,"
                                "\"loss\":%3,\"step_time\":1,\"tokens_per_s\":100}\n")
                            .arg(rank)
                            .arg(step)
                            .arg(5.0 / step)
                            .toUtf8());
        }
        const QString out = QDir(dir.path()).filePath("m.png");
        Run r = render({"monitor/ranks-at-50", "--run", dir.path() + "/run", "-o", out});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        QCOMPARE(QImage(out).size(), QSize(1600, 1000));
        r = render({"monitor", "--run", dir.path() + "/nothing", "-o", out});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("not a directory"), qPrintable(r.err));
        r = render({"monitor/at-50", "-o", out}); // a moment needs a run to replay
        QCOMPARE(r.code, 2);
        r = render({"monitor/ranks-at-500", "--run", dir.path() + "/run", "-o", out});
        QCOMPARE(r.code, 2);
    }

    void badInputExitsTwoWithAMessage() {
        QTemporaryDir dir;
        const QString out = QDir(dir.path()).filePath("o.png");
        Run r = render({"nowhere", "-o", out});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("unknown page") && r.err.contains("memory"), qPrintable(r.err));
        r = render({"memory", "-o", QDir(dir.path()).filePath("o.jpg")});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains(".png"));
        r = render({"memory", "--session", dir.path() + "/missing.shardscope", "-o", out});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("missing.shardscope"));
        r = render({"memory", "-o", out, "--size", "huge"});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("--size"));
        r = render({"memory", "-o", out, "--size", "400x300"}); // below the window's minimum
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("cannot be smaller"), qPrintable(r.err));
        r = render({"explorer/nothing", "-o", out});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("overview, cluster, search"), qPrintable(r.err));
        QVERIFY(!QFile::exists(out));
        // Stepping 2^31 times hung: a step past the algorithm's last is refused with the range.
        // The default ring all-reduce over 8 ranks has 2 x 7 steps.
        r = render({"collectives/step-2147483647", "-o", out});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("step-0 to step-14"), qPrintable(r.err));
        r = render({"collectives/step-14", "-o", out});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        // An unknown option or a missing value: exit 2 naming it (Qt's process() said 1).
        r = render({"memory", "-o", out, "--colour", "blue"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("Unknown option 'colour'") && r.err.contains("--help"),
                 qPrintable(r.err));
        r = render({"memory", "-o"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("Missing value after '-o'"), qPrintable(r.err));
    }

    // Without a display the window cannot open: a message and exit 2, not Qt's abort (134);
    // --version and --help need none.
    void noDisplayIsAClearErrorAndVersionNeedsNone() {
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        for (const char* name : {"QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"})
            env.remove(name);
        QProcess p;
        p.setProcessEnvironment(env);
        p.start(SHARDSCOPE_APP, QStringList{});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 2);
        QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains("no display"));
        p.start(SHARDSCOPE_APP, QStringList{"--version"});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 0);
        QVERIFY2(p.readAllStandardOutput().contains(SHARDSCOPE_VERSION), "no version printed");
    }
};

QTEST_MAIN(TestRender)
#include "test_render.moc"
