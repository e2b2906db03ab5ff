// Frames per second of the pipeline animation: a PipelineView of p = 16 ranks and m = 64
// microbatches drawn offscreen at successive playhead times. Target: 60 fps.
//
//   build/dev/bench/bench_pipeline_frames [frames]
#include "pipeline_view.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QPainter>
#include <cstdio>

using namespace shardscope;

int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const int frames = argc > 1 ? std::max(10, std::atoi(argv[1])) : 600;
    for (PipelineSchedule kind : {PipelineSchedule::OneFOneB, PipelineSchedule::ZeroBubble,
                                  PipelineSchedule::Interleaved}) {
        const int v = kind == PipelineSchedule::Interleaved ? 2 : 1;
        PipelineCosts costs;
        costs.perRank = {{1.0 / v, 1.0 / v, 1.0 / v}};
        const PipelineTimeline t = simulate(buildPipelineProgram({kind, 16, 64, v}), costs);
        PipelineView view;
        view.resize(1600, 500);
        view.setTimeline(t, v, "bench");
        QImage image(view.size(), QImage::Format_ARGB32_Premultiplied);
        QElapsedTimer timer;
        timer.start();
        for (int i = 0; i < frames; ++i) {
            view.setPlayhead(t.makespan * i / frames);
            QPainter painter(&image);
            view.renderTo(painter, image.size());
        }
        const double seconds = double(timer.nsecsElapsed()) / 1e9;
        std::printf("%-12s p=16 m=64 (%zu ops), 1600x500: %d frames in %.2f s = %.0f fps "
                    "(%.2f ms per frame)\n",
                    toString(kind).c_str(), buildPipelineProgram({kind, 16, 64, v}).opCount(),
                    frames, seconds, frames / seconds, 1000 * seconds / frames);
    }
    return 0;
}
