// Desktop integration files: well-formed, and agreeing with each other and with the app.
#include "session.h"

#include <QFile>
#include <QSettings>
#include <QXmlStreamReader>
#include <QtTest>

namespace {
QByteArray read(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool wellFormed(const QByteArray& xml, QString* error) {
    QXmlStreamReader r(xml);
    while (!r.atEnd())
        r.readNext();
    *error = r.errorString();
    return !r.hasError();
}
} // namespace

class TestPackaging : public QObject {
    Q_OBJECT
private slots:
    void desktopEntryOpensSessions() {
        QSettings desktop(SHARDSCOPE_SOURCE_DIR "/packaging/shardscope.desktop",
                          QSettings::IniFormat);
        desktop.beginGroup("Desktop Entry");
        QCOMPARE(desktop.value("Type").toString(), QString("Application"));
        QCOMPARE(desktop.value("Exec").toString(), QString("shardscope %f"));
        QCOMPARE(desktop.value("Icon").toString(), QString("shardscope"));
        QVERIFY(desktop.value("MimeType").toString().contains("application/x-shardscope-session"));
    }

    void mimeTypeMatchesTheSessionFormat() {
        const QByteArray xml = read(SHARDSCOPE_SOURCE_DIR "/packaging/shardscope-mime.xml");
        QString error;
        QVERIFY2(wellFormed(xml, &error), qPrintable(error));
        QVERIFY(xml.contains("type=\"application/x-shardscope-session\""));
        QVERIFY(xml.contains("pattern=\"*.shardscope\""));
        // The magic string is what sessionToJson writes.
        QVERIFY(xml.contains(QByteArray("&quot;format&quot;: &quot;") +
                             shardscope::Session::kFormatName + "&quot;"));
    }

    void metainfoIsWellFormed() {
        const QByteArray xml =
            read(SHARDSCOPE_SOURCE_DIR "/packaging/io.shardscope.Shardscope.metainfo.xml");
        QString error;
        QVERIFY2(wellFormed(xml, &error), qPrintable(error));
        QVERIFY(xml.contains("<launchable type=\"desktop-id\">shardscope.desktop</launchable>"));
        QVERIFY(xml.contains("GPL-3.0-or-later"));
    }
};

QTEST_MAIN(TestPackaging)
#include "test_packaging.moc"
