// A control change to a full redraw of a page: the edit goes through the bound spin box (edit ->
// estimate -> every figure, table, chart and the cluster map rebuilt), then the page is repainted
// synchronously (every widget of the page, changed or not). Target: under 16 ms for Llama 3 405B
// on 16,384 GPUs. Hidden pages only mark themselves stale, as in the app.
//
//   build/release/bench/bench_redraw [iterations]
#include "controls/session_form.h"
#include "core/presets.h"
#include "pages/explorer_page.h"
#include "pages/memory_page.h"
#include "session_document.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QSpinBox>
#include <QTabWidget>
#include <algorithm>
#include <cstdio>
#include <vector>

using namespace shardscope;

namespace {

Session llama405b() {
    Session s = defaultSession();
    s.modelOrigin = "llama3-405b";
    s.model = findModelPreset("llama3-405b");
    s.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 2048);
    s.parallel.tp = 8;
    s.parallel.pp = 16;
    s.parallel.dp = 128;
    s.parallel.globalBatch = 2048;
    s.parallel.schedule = PipelineSchedule::Interleaved;
    s.parallel.vpp = 2;
    return s;
}

struct Stats {
    double median, p95, max;
    double updateMedian; // the control change alone: edit, estimate, every view model rebuilt
};

// Toggle `control` between two values; each toggle is one control change and one full redraw.
Stats measure(QWidget& page, SessionForm& form, const char* control, int a, int b, int n,
              bool forced) {
    auto* spin = qobject_cast<QSpinBox*>(form.control(control));
    std::vector<double> ms, update;
    for (int i = 0; i < n + 3; ++i) {
        QElapsedTimer t;
        t.start();
        spin->setValue(i % 2 ? a : b);
        const double updated = double(t.nsecsElapsed()) / 1e6;
        if (forced)
            page.repaint();
        else
            QApplication::processEvents(); // what the app does: repaint what changed
        if (i >= 3) {                      // the first paints warm caches and fonts
            ms.push_back(double(t.nsecsElapsed()) / 1e6);
            update.push_back(updated);
        }
    }
    std::sort(ms.begin(), ms.end());
    std::sort(update.begin(), update.end());
    const std::size_t last = ms.size() - 1;
    return {ms[last / 2], ms[std::size_t(double(last) * 0.95)], ms[last], update[last / 2]};
}

void report(const char* what, const Stats& s) {
    std::printf("%-62s median %6.2f ms  p95 %6.2f ms  max %6.2f ms  (update alone %5.2f ms)\n",
                what, s.median, s.p95, s.max, s.updateMedian);
}

} // namespace

int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const int n = argc > 1 ? std::max(5, std::atoi(argv[1])) : 40;

    SessionDocument doc;
    doc.reset(llama405b());
    std::printf("Llama 3 405B on %d GPUs, window 1600x1000, %d changes each\n",
                doc.session().cluster.worldSize(), n);

    ExplorerPage explorer(&doc);
    explorer.resize(1600, 1000);
    explorer.show();
    for (const char* view : {"overview", "cluster"}) {
        explorer.showView(view);
        QApplication::processEvents();
        const std::string what = std::string("Explorer/") + view + ": global batch 2048 <-> 4096";
        report((what + ", full repaint").c_str(),
               measure(explorer, *explorer.form(), "global-batch", 2048, 4096, n, true));
        report((what + ", event loop").c_str(),
               measure(explorer, *explorer.form(), "global-batch", 2048, 4096, n, false));
        const std::string mb = std::string("Explorer/") + view + ": micro batch 1 <-> 2";
        report((mb + ", full repaint").c_str(),
               measure(explorer, *explorer.form(), "micro-batch", 1, 2, n, true));
    }
    explorer.hide();

    MemoryPage memory(&doc);
    memory.resize(1600, 1000);
    memory.show();
    QApplication::processEvents();
    report("Memory: micro batch 1 <-> 2, full repaint",
           measure(memory, *memory.form(), "micro-batch", 1, 2, n, true));
    report("Memory: micro batch 1 <-> 2, event loop",
           measure(memory, *memory.form(), "micro-batch", 1, 2, n, false));
    return 0;
}
