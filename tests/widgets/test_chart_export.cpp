// exportChart: PNG, SVG and PDF through renderTo, and clear messages when it cannot write.
#include "cluster_map.h"
#include "memory_chart.h"

#include <QFile>
#include <QImage>
#include <QSvgRenderer>
#include <QTemporaryDir>
#include <QtTest>

using namespace shardscope;

namespace {

MemoryBreakdown breakdown(double gb) {
    MemoryBreakdown m;
    m.parameters = 2 * gb * 1e9;
    m.gradients = 1 * gb * 1e9;
    m.optimizer = 4 * gb * 1e9;
    m.activations = 3 * gb * 1e9;
    return m;
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool hasColor(const QImage& image, QColor color) {
    const QImage img = image.convertToFormat(QImage::Format_RGB32);
    for (int y = 0; y < img.height(); ++y)
        for (int x = 0; x < img.width(); ++x)
            if (img.pixelColor(x, y) == color)
                return true;
    return false;
}

} // namespace

class TestChartExport : public QObject {
    Q_OBJECT

private slots:
    void init() {
        chart_ = std::make_unique<MemoryChart>();
        chart_->setTitle(QStringLiteral("Memory per GPU"));
        chart_->setCaption(QStringLiteral("Llama 3 70B on 64 x H100, dp2 tp8 pp4"));
        chart_->setBars(
            {{QStringLiteral("stage 0"), breakdown(5)}, {QStringLiteral("stage 1"), breakdown(4)}},
            80e9, QStringLiteral("H100 SXM5 80 GB"));
    }
    void cleanup() { chart_.reset(); }

    // Two pixels per point, the title above the chart and the caption below it: a band of text
    // at each end, the chart between.
    void pngIsTwiceTheSizeWithTitleAndCaption() {
        const QString path = dir_.filePath(QStringLiteral("memory.png"));
        QCOMPARE(exportChart(*chart_, path, QSize(800, 500)), QString());
        const QImage image(path);
        QVERIFY(!image.isNull());
        QCOMPARE(image.width(), 1600);
        QVERIFY2(image.height() > 1000 + 2 * 20 && image.height() < 1000 + 2 * 120,
                 qPrintable(QString::number(image.height())));
        // The bottom category (weights) is drawn in Okabe-Ito blue.
        QVERIFY(hasColor(image, QColor(0x00, 0x72, 0xB2)));
        const auto inked = [&](int top, int bottom) { // rows holding anything but background
            const QRgb bg = image.pixel(0, 0);
            for (int y = top; y < bottom; ++y)
                for (int x = 0; x < image.width(); ++x)
                    if (image.pixel(x, y) != bg)
                        return true;
            return false;
        };
        QVERIFY(inked(0, 30));                               // the title
        QVERIFY(inked(image.height() - 40, image.height())); // the caption
        chart_->setTitle(QString());
        chart_->setCaption(QString());
        QCOMPARE(exportChart(*chart_, path, QSize(800, 500)), QString());
        QCOMPARE(QImage(path).size(), QSize(1600, 1000)); // nothing to frame: the chart alone
    }

    void pngDefaultsToAtLeast640x400() {
        chart_->resize(300, 200);
        chart_->setTitle(QString());
        chart_->setCaption(QString());
        const QString path = dir_.filePath(QStringLiteral("small.png"));
        QCOMPARE(exportChart(*chart_, path), QString());
        QCOMPARE(QImage(path).size(), QSize(1280, 800));
    }

    void painterChartExportsToPng() {
        ClusterMap map;
        ClusterSpec cluster;
        cluster.nodes = 2;
        ParallelConfig config;
        config.tp = 8;
        config.dp = 2;
        map.setLayout(cluster, config);
        const QString path = dir_.filePath(QStringLiteral("map.png"));
        QCOMPARE(exportChart(map, path, QSize(700, 450)), QString());
        const QImage image(path);
        QCOMPARE(image.width(), 1400);
        QVERIFY(image.height() > 900); // and its title above
        QVERIFY(hasColor(image, map.colorOf(0)));
    }

    void svgIsValidVectorOutput() {
        const QString path = dir_.filePath(QStringLiteral("memory.svg"));
        QCOMPARE(exportChart(*chart_, path, QSize(800, 500)), QString());
        const QByteArray svg = readAll(path);
        QVERIFY(svg.contains("<svg"));
        QVERIFY(QSvgRenderer(path).isValid());
        // Text stays text (vector), not pixels.
        QVERIFY(svg.contains("GB per GPU"));
        QVERIFY(svg.contains("Memory per GPU"));                        // the title
        QVERIFY(svg.contains("Llama 3 70B on 64 x H100, dp2 tp8 pp4")); // the caption
        QVERIFY(!svg.contains("<image"));
    }

    void pdfIsOnePageOfTheChart() {
        const QString path = dir_.filePath(QStringLiteral("memory.pdf"));
        QCOMPARE(exportChart(*chart_, path, QSize(800, 500)), QString());
        const QByteArray pdf = readAll(path);
        QVERIFY(pdf.startsWith("%PDF"));
        QVERIFY(pdf.contains("/Type /Page"));
        QCOMPARE(pdf.count("/Type /Page\n"), 1);
        // 800 x 500 px at 96 dpi is 600 x 375 pt; the title and caption add to its height.
        QVERIFY(pdf.contains("/MediaBox [0 0 600.000000 "));
        QVERIFY(!pdf.contains("/MediaBox [0 0 600.000000 375.000000]"));
        chart_->setTitle(QString());
        chart_->setCaption(QString());
        QCOMPARE(exportChart(*chart_, path, QSize(800, 500)), QString());
        QVERIFY(readAll(path).contains("/MediaBox [0 0 600.000000 375.000000]"));
    }

    void unknownExtensionIsRefused() {
        const QString path = dir_.filePath(QStringLiteral("memory.bmp"));
        const QString message = exportChart(*chart_, path, QSize(400, 300));
        QVERIFY(!message.isEmpty());
        QVERIFY(message.contains(path));
        QVERIFY(message.contains(QStringLiteral(".png")));
        QVERIFY(message.contains(QStringLiteral(".svg")));
        QVERIFY(message.contains(QStringLiteral(".pdf")));
        QVERIFY(!QFile::exists(path));
    }

    void unwritableDirectoryGivesAMessage() {
        for (const char* name : {"x.png", "x.svg", "x.pdf"}) {
            const QString path =
                dir_.filePath(QStringLiteral("missing/dir/")) + QLatin1String(name);
            const QString message = exportChart(*chart_, path, QSize(400, 300));
            QVERIFY2(!message.isEmpty(), name);
            QVERIFY(message.contains(path));
            QVERIFY(!QFile::exists(path));
        }
    }

private:
    QTemporaryDir dir_;
    std::unique_ptr<MemoryChart> chart_;
};

QTEST_MAIN(TestChartExport)
#include "test_chart_export.moc"
