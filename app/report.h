// The report of the current plan: the session summary, then each page's section with its charts,
// as HTML (images embedded, one self-contained file) or PDF.
#pragma once

#include <QImage>
#include <QMap>
#include <QString>
#include <vector>

namespace shardscope {

class Page;
class SessionDocument;

struct Report {
    QString html;                 // <img src="img-N.png"> for each image
    QMap<QString, QImage> images; // "img-N.png" -> the chart rendered
};

Report buildReport(const SessionDocument& doc, const std::vector<Page*>& pages);
// .html or .pdf by extension. Returns an empty string on success, otherwise a message.
QString exportReport(const SessionDocument& doc, const std::vector<Page*>& pages,
                     const QString& path);

} // namespace shardscope
