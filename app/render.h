// `shardscope --render PAGE --session FILE -o OUT.png`: draw one page of the window for a
// session with no display and exit. PAGE is a page id ("memory", "explorer") optionally with a
// view ("explorer/cluster", "explorer/search"; the search view runs the search first), and for
// the Monitor page `--run DIR`, a run directory shown as it ended.
#pragma once

#include <QSize>
#include <QString>

namespace shardscope {

struct RenderRequest {
    QString page = "memory";
    QString session; // empty: the default session
    QString output;
    QSize size = {1600, 1000};
    QString theme = "light";
    QString run; // a run directory for the Monitor page ("monitor/pipeline" shows its pipeline)
};

// Needs a QApplication. Returns an empty string on success, otherwise what went wrong.
QString renderPage(const RenderRequest& request);

} // namespace shardscope
