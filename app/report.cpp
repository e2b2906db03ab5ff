#include "report.h"

#include "core/units.h"
#include "pages/page.h"
#include "pages/page_support.h"
#include "save_file.h"
#include "session_document.h"

#include <QBuffer>
#include <QDateTime>
#include <QFileInfo>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QRegularExpression>
#include <QSaveFile>
#include <QTextDocument>

namespace shardscope {

namespace {

constexpr int kReportScale = 2;

// A chart drawn at the size it is printed (its fonts at their own size, never shrunk below
// 8 pt), two pixels per point, finished (a whole pipeline, not an animation's frame).
QImage renderChart(Chart& chart, int printedWidth) {
    const QSize size(printedWidth, chart.printHeight(printedWidth));
    QImage image(size * kReportScale, QImage::Format_ARGB32_Premultiplied);
    image.setDevicePixelRatio(kReportScale);
    image.fill(chart.palette().color(QPalette::Base));
    QPainter painter(&image);
    chart.renderComplete(painter, size);
    return image;
}

// Body text at 10 pt and small print at 8 pt, the least a printed page should carry.
const char* const kReportStyle = "body { font-size: 10pt; } small { font-size: 8pt; } "
                                 "td, th { font-size: 9pt; } h2 { font-size: 14pt; } "
                                 "h3 { font-size: 11pt; }";

QString summaryHtml(const SessionDocument& doc) {
    const Session& s = doc.session();
    const Estimate& e = doc.estimate();
    QString html = "<table cellpadding=\"3\">";
    auto row = [&](const QString& k, const QString& v) {
        html += "<tr><td><b>" + k + "</b></td><td>" + v.toHtmlEscaped() + "</td></tr>";
    };
    row("Model", qs(s.model.name + " (" + formatCount(double(e.params.total)) + " parameters, " +
                    toString(s.modelSource) + ")"));
    row("Cluster", QString("%1 nodes x %2 %3, NVLink %4/s, network %5/s per GPU")
                       .arg(s.cluster.nodes)
                       .arg(s.cluster.gpusPerNode)
                       .arg(qs(s.cluster.gpu.name), qs(formatBytes(s.cluster.intraBandwidth)),
                            qs(formatBytes(s.cluster.interBandwidth))));
    row("Layout", qs(layoutSummary(s.parallel)));
    row("Batch", QString("%1 sequences x %2 tokens, %3")
                     .arg(s.parallel.globalBatch)
                     .arg(s.model.seqLen)
                     .arg(qs(s.parallel.precision.name())));
    if (s.train.trainTokens > 0)
        row("Tokens to train", qs(formatCount(s.train.trainTokens)));
    return html + "</table>";
}

} // namespace

Report buildReport(const SessionDocument& doc, const std::vector<Page*>& pages) {
    Report r;
    r.html = QString("<html><head><meta charset=\"utf-8\"><title>Shardscope plan</title>"
                     "<style>%1</style></head><body>")
                 .arg(kReportStyle);
    r.html += "<h1>Shardscope plan</h1><p><small>Shardscope " SHARDSCOPE_VERSION ", " +
              QDateTime::currentDateTimeUtc().toString(Qt::ISODate) + "</small></p>";
    r.html += summaryHtml(doc);
    int n = 0;
    for (Page* page : pages) {
        page->ensureFresh();
        QString section = page->reportHtml();
        if (section.isEmpty())
            continue; // a lesson, or a run not yet made: not part of the plan
        const std::vector<Chart*> charts = page->charts();
        // <img src="chart:N" width="W">: the chart drawn W points wide.
        static const QRegularExpression image(R"re("chart:(\d+)" width="(\d+)")re");
        for (auto m = image.globalMatch(section); m.hasNext();) {
            const QRegularExpressionMatch hit = m.next();
            const std::size_t i = hit.captured(1).toULong();
            if (i >= charts.size())
                continue;
            const QString name = QString("img-%1.png").arg(n++);
            r.images.insert(name, renderChart(*charts[i], hit.captured(2).toInt()));
            section.replace("\"chart:" + hit.captured(1) + "\"", "\"" + name + "\"");
        }
        r.html += section;
    }
    r.html += "<hr><p><small>Figures are predictions of the Shardscope planner; every figure's "
              "formula and source is listed with it.</small></p></body></html>";
    return r;
}

QString exportReport(const SessionDocument& doc, const std::vector<Page*>& pages,
                     const QString& path) {
    const QString ext = QFileInfo(path).suffix().toLower();
    if (ext != "html" && ext != "htm" && ext != "pdf")
        return QString("cannot export a report as \"%1\": use a .html or .pdf file name").arg(path);
    const Report r = buildReport(doc, pages);

    if (ext == "pdf") {
        QTextDocument text;
        text.setDefaultStyleSheet(kReportStyle);
        for (auto it = r.images.begin(); it != r.images.end(); ++it)
            text.addResource(QTextDocument::ImageResource, QUrl(it.key()), it.value());
        text.setHtml(r.html);
        QSaveFile paged(path);
        if (!paged.open(QIODevice::WriteOnly))
            return "cannot write " + path + ": " + paged.errorString();
        {
            QPdfWriter pdf(&paged);
            pdf.setPageSize(QPageSize(QPageSize::A4));
            pdf.setResolution(150);
            pdf.setTitle("Shardscope plan");
            pdf.setCreator("Shardscope " SHARDSCOPE_VERSION);
            text.print(&pdf); // paginates; the writer finishes the file when it goes
        }
        if (!paged.commit())
            return "cannot write " + path + ": " + paged.errorString();
        return {};
    }

    // HTML: images inlined as data URIs so the report is one file that can be mailed.
    QString html = r.html;
    for (auto it = r.images.begin(); it != r.images.end(); ++it) {
        QByteArray png;
        QBuffer buffer(&png);
        buffer.open(QIODevice::WriteOnly);
        it.value().save(&buffer, "PNG");
        html.replace("\"" + it.key() + "\"",
                     "\"data:image/png;base64," + QString::fromLatin1(png.toBase64()) + "\"");
    }
    return saveFileAtomically(path, html.toUtf8());
}

} // namespace shardscope
