#include "pipeline_page.h"

#include "calculator_panel.h"
#include "controls/player_controls.h"
#include "controls/session_form.h"
#include "core/error.h"
#include "core/units.h"
#include "page_support.h"
#include "pipeline_view.h"
#include "plan/explain.h"
#include "save_file.h"
#include "sched/chrome_trace.h"
#include "series_chart.h"
#include "session_document.h"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QStandardItemModel>
#include <QStringList>
#include <QTableView>
#include <QVBoxLayout>

namespace shardscope {

namespace {

const std::vector<std::pair<QString, QString>> kSchedules = {
    {"Naive (no microbatching)", "naive"},
    {"GPipe", "gpipe"},
    {"1F1B", "1f1b"},
    {"Interleaved 1F1B", "interleaved"},
    {"Zero bubble (ZB-H1)", "zero-bubble"},
    {"Zero bubble ZB-1p (automatic, 1F1B's memory)", "zb-1p"},
    {"Zero bubble ZB-2p (automatic, twice the memory)", "zb-2p"}};

QString scheduleName(PipelineSchedule s) {
    for (const auto& [name, key] : kSchedules) {
        if (key.toStdString() == toString(s))
            return name;
    }
    return {};
}

PipelineLesson shown(const Session& s) {
    return pipelineLessonOf(s.parallel, s.pipeline);
}

// Setting p, m, v or the schedule on the page starts an experiment from what it showed.
void experiment(Session& s) {
    s.pipeline = shown(s);
    s.pipeline.followsLayout = false;
}

QString layoutText(const ParallelConfig& p) {
    QString text = QString("pp %1, m %2").arg(p.pp).arg(p.microbatches());
    if (p.schedule == PipelineSchedule::Interleaved)
        text += QString(", v %1").arg(p.vpp);
    return text + ", " + scheduleName(p.schedule);
}

// What one pipeline rank of the animation stands for in the layout: the tp x cp GPUs that
// compute each of its microbatches together, and the replicas running the same schedule.
QString groupText(const ParallelConfig& p) {
    QStringList parts;
    if (p.tp * p.cp > 1)
        parts << QString("each pipeline rank drawn is tp %1 x cp %2 = %3 GPUs computing every "
                         "microbatch together")
                     .arg(p.tp)
                     .arg(p.cp)
                     .arg(p.tp * p.cp);
    if (p.dp > 1)
        parts << QString("%1 data-parallel replicas run the same schedule").arg(p.dp);
    return parts.isEmpty() ? QString() : "; " + parts.join("; ");
}

} // namespace

PipelinePage::PipelinePage(SessionDocument* doc, QWidget* parent)
    : Page(parent), doc_(doc), panel_(new CalculatorPanel(this)), form_(new SessionForm(doc)),
      viewA_(new PipelineView), viewB_(new PipelineView), memory_(new SeriesChart),
      figures_(new QStandardItemModel(this)), opsA_(new QStandardItemModel(this)),
      scrub_(new QSlider(Qt::Horizontal)), layoutNote_(new QLabel),
      backToLayout_(new QPushButton("Back to the session's layout")) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(panel_);

    form_->addSection("Schedule");
    form_->addChoice(
        "schedule", "Schedule", "The pipeline schedule to run", kSchedules,
        [](const Session& s) { return qs(toString(shown(s).schedule)); },
        [](Session& s, const QString& k) {
            experiment(s);
            s.pipeline.schedule = scheduleFromString(k.toStdString());
            if (s.pipeline.schedule == PipelineSchedule::Interleaved &&
                s.pipeline.virtualStages < 2)
                s.pipeline.virtualStages = 2; // interleaving needs two chunks per rank
        });
    std::vector<std::pair<QString, QString>> compare;
    compare.reserve(kSchedules.size() + 1);
    compare.emplace_back("Nothing", "none");
    for (const auto& item : kSchedules)
        compare.push_back(item);
    form_->addChoice(
        "compare", "Compare with", "A second schedule drawn beneath, on the same time axis",
        compare,
        [](const Session& s) {
            return s.pipeline.compare ? qs(toString(*s.pipeline.compare)) : QString("none");
        },
        [](Session& s, const QString& k) {
            s.pipeline.compare =
                k == "none" ? std::nullopt : std::optional(scheduleFromString(k.toStdString()));
        });
    form_->addInt(
        "pp", "Pipeline ranks (p)", "Pipeline stages, one per rank", 1, PipelineLesson::kMaxStages,
        [](const Session& s) { return shown(s).stages; },
        [](Session& s, int v) {
            experiment(s);
            s.pipeline.stages = v;
        });
    form_->addInt(
        "microbatches", "Microbatches (m)", "Microbatches per step", 1,
        PipelineLesson::kMaxMicrobatches, [](const Session& s) { return shown(s).microbatches; },
        [](Session& s, int v) {
            experiment(s);
            s.pipeline.microbatches = v;
        },
        true);
    form_->addInt(
        "vpp", "Chunks per rank (v)", "Model chunks per rank for interleaved 1F1B", 1, 16,
        [](const Session& s) { return shown(s).virtualStages; },
        [](Session& s, int v) {
            experiment(s);
            s.pipeline.virtualStages = v;
        });
    form_->addSection("Op costs per stage (time units)");
    form_->addDouble(
        "forward", "Forward (F)",
        "Time of one microbatch's forward through one rank's layers (an interleaved chunk holds "
        "1/v of them and costs 1/v)",
        0, 1000, 2, "", [](const Session& s) { return s.pipeline.costs.forward; },
        [](Session& s, double v) { s.pipeline.costs.forward = v; });
    form_->addDouble(
        "backward-input", "Input gradient (B)", "Time of the backward's input-gradient half", 0,
        1000, 2, "", [](const Session& s) { return s.pipeline.costs.backwardInput; },
        [](Session& s, double v) { s.pipeline.costs.backwardInput = v; });
    form_->addDouble(
        "backward-weight", "Weight gradient (W)",
        "Time of the backward's weight-gradient half (a fused backward costs B + W)", 0, 1000, 2,
        "", [](const Session& s) { return s.pipeline.costs.backwardWeight; },
        [](Session& s, double v) { s.pipeline.costs.backwardWeight = v; });
    form_->addDouble(
        "p2p", "Point-to-point", "Time for an activation or gradient to reach the next rank", 0,
        1000, 2, "", [](const Session& s) { return s.pipeline.p2p; },
        [](Session& s, double v) { s.pipeline.p2p = v; });
    panel_->setControls(form_);

    // Player: play/pause, restart, speed, scrub.
    auto* player = new PlayerControls(&clock_);
    scrub_->setObjectName("scrub");
    scrub_->setRange(0, 1000);
    player->addTrailing(scrub_, 1);
    connect(scrub_, &QSlider::sliderMoved, this, [this](int v) {
        pause();
        setAnimationTime(kPlaySeconds * v / 1000.0);
    });
    connect(&clock_, &AnimationClock::positionChanged, this, &PipelinePage::showPosition);

    viewA_->setTitle("Pipeline timeline");
    viewB_->setTitle("Pipeline timeline (compared)");
    memory_->setTitle("Peak activations per rank");
    memory_->setAxes("pipeline rank", ValueKind::Plain, false, "microbatches held",
                     ValueKind::Plain);
    auto* table = makeTable(figures_);
    auto* exportTrace = new QPushButton("Export trace (Chrome JSON)...");
    connect(exportTrace, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, "Export trace", "pipeline.json",
                                                          "Chrome trace (*.json)");
        if (!path.isEmpty()) {
            const QString error = this->exportTrace(path);
            if (!error.isEmpty())
                panel_->setVerdict(error.toHtmlEscaped(), VerdictLevel::Bad);
        }
    });

    // Which layout the page shows: the session's, or the user's experiment.
    layoutNote_->setObjectName("layout-note");
    layoutNote_->setWordWrap(true);
    backToLayout_->setObjectName("back-to-layout");
    connect(backToLayout_, &QPushButton::clicked, this, [this] {
        doc_->edit("Show the session's pipeline layout",
                   [](Session& s) { s.pipeline.followsLayout = true; });
    });
    auto* source = new QHBoxLayout;
    source->addWidget(layoutNote_, 1);
    source->addWidget(backToLayout_);

    auto* picture = new QWidget;
    auto* v = new QVBoxLayout(picture);
    v->setContentsMargins(0, 0, 0, 0);
    v->addLayout(source);
    v->addWidget(player);
    v->addWidget(viewA_, 3);
    v->addWidget(viewB_, 3);
    auto* bottom = new QHBoxLayout;
    auto* left = new QVBoxLayout;
    left->addWidget(table, 1);
    left->addWidget(exportTrace);
    bottom->addLayout(left, 1);
    bottom->addWidget(memory_, 1);
    v->addLayout(bottom, 2);
    panel_->setPicture(picture);
    panel_->setLesson(
        id(), "One row per pipeline rank, time running right: forward passes in blue, backward "
              "passes in green (zero bubble splits them into the input gradient B, green, and "
              "the weight gradient W, orange), "
              "and the grey gaps are the bubble, where a rank waits for its neighbour. The "
              "chart below counts the microbatches each rank keeps activations for. "
              "<b>Try:</b> compare GPipe with 1F1B (the same bubble, far fewer activations "
              "held); raise the microbatches and watch the bubble's share shrink as (p-1)/m; "
              "choose interleaved with v = 2 and see the bubble halve.");

    connect(doc_, &SessionDocument::changed, this, &PipelinePage::sessionChanged);
    form_->refresh();
    refresh();
}

std::vector<Chart*> PipelinePage::charts() const {
    return {viewA_, viewB_, memory_};
}

std::vector<std::pair<QString, QAbstractItemModel*>> PipelinePage::tables() const {
    return {{"Pipeline figures", figures_}, {"Pipeline timeline", opsA_}};
}

double PipelinePage::longestMakespan() const {
    return std::max(timelineA_ ? timelineA_->makespan : 0.0,
                    timelineB_ ? timelineB_->makespan : 0.0);
}

void PipelinePage::refresh() {
    const Session& s = doc_->session();
    std::string clamped;
    const PipelineLesson l = pipelineLessonOf(s.parallel, s.pipeline, &clamped);
    if (l.followsLayout)
        layoutNote_->setText(
            QString("Showing the session's layout from the Explorer: %1%2%3. Change p, m, v or "
                    "the schedule here to experiment.")
                .arg(layoutText(s.parallel), clamped.empty() ? QString() : " (" + qs(clamped) + ")",
                     groupText(s.parallel)));
    else
        layoutNote_->setText(
            QString("Experimenting: the session's layout is %1.").arg(layoutText(s.parallel)));
    backToLayout_->setVisible(!l.followsLayout);
    timelineA_.reset();
    timelineB_.reset();
    QString problem;
    auto simulateOne = [&](PipelineSchedule kind) -> std::optional<PipelineTimeline> {
        try {
            return simulate(buildPipelineProgram(l.spec(kind)), l.pipelineCosts(kind));
        } catch (const InputError& e) {
            problem += scheduleName(kind) + ": " + qs(e.what()) + "\n";
            return std::nullopt;
        }
    };
    timelineA_ = simulateOne(l.schedule);
    if (l.compare)
        timelineB_ = simulateOne(*l.compare);

    const double span = longestMakespan();
    std::vector<QList<QStandardItem*>> rows;
    std::vector<Series> series;
    std::vector<Explanation> explanations;
    const auto show = [&](PipelineView* view, const std::optional<PipelineTimeline>& t,
                          PipelineSchedule kind) {
        if (!t) {
            view->clear(problem);
            return;
        }
        const ScheduleSpec spec = l.spec(kind);
        const Explanation closed =
            explainPipelineBubble(kind, spec.stages, spec.microbatches, spec.virtualStages);
        explanations.push_back(closed);
        const QString name = scheduleName(kind);
        view->setTimeline(*t, l.spec(kind).virtualStages,
                          QString("%1: makespan %2, bubble %3 (closed form %4)")
                              .arg(name)
                              .arg(t->makespan, 0, 'g', 4)
                              .arg(qs(formatPercent(t->bubbleFraction)), qs(closed.display)));
        view->setTimeScale(span);
        double peak = 0;
        Series memory{name, {}, {}};
        for (std::size_t r = 0; r < t->ranks.size(); ++r) {
            peak = std::max(peak, t->peakActivations[r]);
            memory.x.push_back(double(r));
            memory.y.push_back(t->peakActivations[r]);
        }
        series.push_back(std::move(memory));
        rows.push_back({figureItem(name, 0),
                        figureItem(QString::number(t->makespan, 'g', 4), t->makespan,
                                   "Simulated: when the last op ends (engine/sched simulator)"),
                        figureItem(qs(formatPercent(t->bubbleFraction)), t->bubbleFraction,
                                   "Simulated: idle time of all ranks / (p x makespan)"),
                        figureItem(qs(closed.display), closed.value, explanationTooltip(closed)),
                        figureItem(qs(formatPercent(t->spanBubbleFraction)), t->spanBubbleFraction,
                                   "Simulated, each rank from its first op to its last: the "
                                   "longest rank's idle share, the step's when the optimizer is "
                                   "post-validated (Qi et al. 2024) and the ranks' staggered "
                                   "starts overlap the previous step"),
                        figureItem(QString::number(peak, 'g', 3), peak,
                                   "Most microbatches' activations any rank holds at once (an "
                                   "interleaved chunk counts 1/v; awaiting only W counts 32/34, "
                                   "Qi et al. 2023 Table 1)")});
    };
    show(viewA_, timelineA_, l.schedule);
    viewB_->setVisible(l.compare.has_value());
    if (l.compare)
        show(viewB_, timelineB_, *l.compare);
    setRows(
        figures_,
        {"Schedule", "Makespan", "Bubble", "Formula", "Bubble per rank span", "Peak activations"},
        std::move(rows));
    memory_->setSeries(std::move(series));

    // The first schedule's ops, for CSV export.
    std::vector<QList<QStandardItem*>> ops;
    if (timelineA_) {
        for (std::size_t r = 0; r < timelineA_->ranks.size(); ++r) {
            for (const TimedOp& op : timelineA_->ranks[r])
                ops.push_back({figureItem(QString::number(r), double(r)),
                               figureItem(qs(toString(op.op.kind)), 0),
                               figureItem(QString::number(op.op.microbatch), op.op.microbatch),
                               figureItem(QString::number(op.op.chunk), op.op.chunk),
                               figureItem(QString::number(op.op.stage), op.op.stage),
                               figureItem(QString::number(op.start, 'g', 6), op.start),
                               figureItem(QString::number(op.end, 'g', 6), op.end)});
        }
    }
    setRows(opsA_, {"rank", "op", "microbatch", "chunk", "stage", "start", "end"}, std::move(ops));

    // The verdict: the bubble, and what the comparison saves.
    if (!problem.isEmpty()) {
        panel_->setVerdict(problem.trimmed().toHtmlEscaped().replace("\n", "<br>"),
                           VerdictLevel::Bad);
    } else {
        QString text =
            QString("%1 idles %2 of the time (closed form %3).")
                .arg(scheduleName(l.schedule), qs(formatPercent(timelineA_->bubbleFraction)),
                     qs(explanations.front().display));
        if (timelineB_) {
            const double saved = timelineA_->makespan - timelineB_->makespan;
            text += QString(" %1 takes %2 time units %3 (%4).")
                        .arg(scheduleName(*l.compare))
                        .arg(std::abs(saved), 0, 'g', 4)
                        .arg(saved >= 0 ? "less" : "more")
                        .arg(qs(formatPercent(std::abs(saved) / timelineA_->makespan)));
        }
        panel_->setVerdict(text.toHtmlEscaped(), VerdictLevel::Good);
    }
    panel_->setExplanations(explanations);
    showPosition(clock_.position());
}

void PipelinePage::showPosition(double position) {
    const double t = longestMakespan() * position;
    viewA_->setPlayhead(t);
    viewB_->setPlayhead(t);
    const QSignalBlocker block(scrub_);
    scrub_->setValue(int(1000 * position));
}

QString PipelinePage::exportTrace(const QString& path) const {
    if (!timelineA_)
        return "nothing to export: the schedule cannot run with these settings";
    const std::string text =
        chromeTrace(*timelineA_, toString(shown(doc_->session()).schedule)).dump() + "\n";
    return saveFileAtomically(path, QByteArray::fromStdString(text));
}

bool PipelinePage::showView(const QString& view) {
    if (view.isEmpty())
        return true;
    bool ok = false;
    const double percent = view.startsWith("at-") ? view.mid(3).toDouble(&ok) : -1;
    if (!ok || percent < 0 || percent > 100)
        return false;
    pause();
    setAnimationTime(kPlaySeconds * percent / 100);
    return true;
}

QString PipelinePage::chartCaption(const QString& session) const {
    const PipelineLesson l = pipelineLessonOf(doc_->session().parallel, doc_->session().pipeline);
    QString text = QString("%1%2, p %3, m %4")
                       .arg(qs(toString(l.schedule)),
                            l.compare ? " vs " + qs(toString(*l.compare)) : QString())
                       .arg(l.stages)
                       .arg(l.microbatches);
    if (l.schedule == PipelineSchedule::Interleaved || l.compare == PipelineSchedule::Interleaved)
        text += QString(", v %1").arg(l.virtualStages);
    return l.followsLayout ? text + "; " + session : text + " (an experiment on this page)";
}

QString PipelinePage::reportHtml() const {
    QString html = "<h2>Pipeline schedule</h2><p>" + panel_->verdictText() + "</p>";
    // The first schedule's whole timeline (the session's, unless the page is experimenting);
    // the comparison is the page's lesson, not the plan.
    html += "<p><img src=\"chart:0\" width=\"600\"></p>";
    html += "<p><img src=\"chart:2\" width=\"400\"></p>";
    return html;
}

} // namespace shardscope
