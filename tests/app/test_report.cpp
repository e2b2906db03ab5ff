// Reports: HTML with its images embedded, PDF with pages, clear errors.
#include "main_window.h"
#include "pages/explorer_page.h"
#include "pages/page.h"
#include "pages/page_support.h"
#include "pipeline_view.h"
#include "report.h"

#include <QDir>
#include <QFile>
#include <QPainter>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QStandardItemModel>
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

    // A design-doc appendix: at most four pages for a plan, charts printed at their own size
    // (fonts never shrunk), the pipeline's whole timeline whatever frame the page shows, every
    // figure cited to its source, no lessons and no instructions for the window.
    void readsAsADesignDocAppendix() {
        QTemporaryDir dir;
        MainWindow w;
        w.setQuiet(true);
        // A pipeline with cells wide enough to tell filled from outlined, its animation at the
        // start.
        w.document()->edit("pipeline", [](Session& s) {
            s.pipeline.followsLayout = false;
            s.pipeline.stages = 4;
            s.pipeline.microbatches = 8;
        });
        QVERIFY(w.page("pipeline")->showView("at-0"));
        const Report r = buildReport(*w.document(), w.pages());
        const QRegularExpression img(R"re(src="(img-\d+\.png)" width="(\d+)")re");
        int images = 0;
        for (auto it = img.globalMatch(r.html); it.hasNext(); ++images) {
            const QRegularExpressionMatch m = it.next();
            const QImage image = r.images.value(m.captured(1));
            QVERIFY(!image.isNull());
            // Printed as wide as it was drawn: nothing scaled down.
            QCOMPARE(int(image.width() / image.devicePixelRatio()), m.captured(2).toInt());
            QCOMPARE(image.devicePixelRatio(), 2.0);
        }
        QVERIFY(images >= 4);
        for (const char* word : {"click", "Click", "drag", "hover", "Hover", "Try:", "Collectives"})
            QVERIFY2(!r.html.contains(word), word);
        QVERIFY(r.html.contains("[1] ")); // sources, cited by number
        QVERIFY(r.html.contains("Rajbhandari"));

        // The pipeline printed whole: its forward ops filled, where the page at 0 % shows only
        // their outlines.
        const int at = int(r.html.indexOf("<h2>Pipeline schedule</h2>"));
        QVERIFY(at > 0);
        const QRegularExpressionMatch first = img.match(r.html, at);
        const QImage printed = r.images.value(first.captured(1));
        auto* view = qobject_cast<PipelineView*>(w.page("pipeline")->charts().front());
        QVERIFY(view);
        QImage frame(printed.size(), QImage::Format_ARGB32_Premultiplied);
        frame.setDevicePixelRatio(2);
        {
            QPainter painter(&frame);
            view->renderTo(painter, printed.size() / 2);
        }
        const QColor forward = view->colorOf(OpKind::Forward);
        const auto count = [&](const QImage& image) {
            int n = 0;
            for (int y = 0; y < image.height(); ++y)
                for (int x = 0; x < image.width(); ++x)
                    n += image.pixelColor(x, y) == forward;
            return n;
        };
        QVERIFY2(count(printed) > 3 * count(frame),
                 qPrintable(QString("%1 %2").arg(count(printed)).arg(count(frame))));

        const QString path = QDir(dir.path()).filePath("plan.pdf");
        QCOMPARE(w.exportReportTo(path), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const qsizetype pages = f.readAll().count("/Type /Page\n");
        QVERIFY2(pages >= 2 && pages <= 4, qPrintable(QString::number(pages)));
    }

    // A search that was run prints its 10 fastest layouts, whatever column the window's table
    // is sorted by, and none of the window's instructions.
    void searchPrintsTheTenFastest() {
        MainWindow w;
        w.setQuiet(true);
        auto* explorer = qobject_cast<ExplorerPage*>(w.page("explorer"));
        QVERIFY(explorer);
        QSignalSpy finished(explorer, &ExplorerPage::searchFinished);
        explorer->startSearch();
        QVERIFY(finished.wait(120000));
        QVERIFY(explorer->results()->rowCount() > 10);
        explorer->findChild<QSortFilterProxyModel*>()->sort(2, Qt::DescendingOrder);
        const Report r = buildReport(*w.document(), w.pages());
        const int at = int(r.html.indexOf("the 10 fastest layouts"));
        QVERIFY(at > 0);
        // The first row's # is 1: the results fastest first, not the table's sort.
        const int cell = int(r.html.indexOf("<tr><td>", at));
        QCOMPARE(r.html.mid(cell + 8, 2), QString("1<"));
        QVERIFY(r.html.indexOf("more rows not shown", at) > 0);
        QVERIFY(!r.html.contains("Click"));
    }

    // Long tables (the search's results) print their first rows and say how many more.
    void longTablesPrintTheirFirstRows() {
        QStandardItemModel model(25, 2);
        for (int r = 0; r < 25; ++r)
            model.setItem(r, 0, new QStandardItem(QString("layout %1").arg(r)));
        const QString html = tableHtml(model, 10);
        QCOMPARE(html.count("<tr>"), 11); // the header and ten rows
        QVERIFY(html.contains("layout 9") && !html.contains("layout 10"));
        QVERIFY(html.contains("15 more rows"));
        QCOMPARE(tableHtml(model).count("<tr>"), 26);
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
