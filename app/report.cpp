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
#include <QSaveFile>
#include <QTextDocument>

namespace shardscope {

namespace {

QImage renderChart(Chart& chart) {
    const QSize size(1280, 800);
    QImage image(size, QImage::Format_ARGB32_Premultiplied);
    image.fill(chart.palette().color(QPalette::Base));
    QPainter painter(&image);
    chart.renderTo(painter, size);
    return image;
}

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
    r.html = "<html><head><meta charset=\"utf-8\"><title>Shardscope plan</title></head><body>";
    r.html += "<h1>Shardscope plan</h1><p><small>Shardscope " SHARDSCOPE_VERSION ", " +
              QDateTime::currentDateTimeUtc().toString(Qt::ISODate) + "</small></p>";
    r.html += summaryHtml(doc);
    int n = 0;
    for (Page* page : pages) {
        page->ensureFresh();
        QString section = page->reportHtml();
        const std::vector<Chart*> charts = page->charts();
        for (std::size_t i = 0; i < charts.size(); ++i) {
            const QString marker = QString("\"chart:%1\"").arg(i);
            if (!section.contains(marker))
                continue;
            const QString name = QString("img-%1.png").arg(n++);
            r.images.insert(name, renderChart(*charts[i]));
            section.replace(marker, "\"" + name + "\"");
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
