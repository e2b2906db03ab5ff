// Reports: HTML with its images embedded, PDF with pages, clear errors.
#include "main_window.h"

#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

using namespace shardscope;

class TestReport : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

    void htmlEmbedsItsImages() {
        QTemporaryDir dir;
        MainWindow w;
        w.setQuiet(true);
        const QString path = QDir(dir.path()).filePath("report.html");
        QCOMPARE(w.exportReportTo(path), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QString html = QString::fromUtf8(f.readAll());
        QVERIFY(html.contains("Llama 3 70B"));
        QVERIFY(html.contains("Memory per GPU"));
        QVERIFY(html.contains("Rajbhandari")); // formulas carry their sources
        QVERIFY(!html.contains("chart:"));     // every placeholder replaced
        const QRegularExpression img("src=\"data:image/png;base64,([A-Za-z0-9+/=]+)\"");
        auto it = img.globalMatch(html);
        int images = 0;
        while (it.hasNext()) {
            const QImage decoded =
                QImage::fromData(QByteArray::fromBase64(it.next().captured(1).toLatin1()), "PNG");
            QVERIFY(!decoded.isNull());
            ++images;
        }
        QVERIFY2(images >= 4, qPrintable(QString::number(images)));
    }

    void pdfHasPages() {
        QTemporaryDir dir;
        MainWindow w;
        w.setQuiet(true);
        const QString path = QDir(dir.path()).filePath("report.pdf");
        QCOMPARE(w.exportReportTo(path), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray pdf = f.readAll();
        QVERIFY(pdf.startsWith("%PDF"));
        QVERIFY(pdf.contains("/Type /Page"));
        QVERIFY(pdf.size() > 20000); // the charts are in it
    }

    void badPathsGiveMessages() {
        MainWindow w;
        w.setQuiet(true);
        QVERIFY(w.exportReportTo("/tmp/report.docx").contains(".html or .pdf"));
        QVERIFY(w.exportReportTo("/nonexistent-dir/r.html").contains("cannot write"));
    }
};

QTEST_MAIN(TestReport)
#include "test_report.moc"
