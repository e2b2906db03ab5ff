#include "collectives_page.h"

#include "calculator_panel.h"
#include "controls/player_controls.h"
#include "controls/session_form.h"
#include "core/error.h"
#include "core/units.h"
#include "page_support.h"
#include "plan/formulas.h"
#include "ring_view.h"
#include "session_document.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>
#include <cmath>

namespace shardscope {

namespace {

const std::vector<std::pair<QString, QString>> kAlgorithms = {
    {"Ring all-reduce", "ring-allreduce"},
    {"Naive all-reduce (reduce to GPU 0, broadcast)", "naive-allreduce"},
    {"Two-level all-reduce (in nodes, across, in nodes)", "two-level-allreduce"},
    {"Ring all-gather", "ring-allgather"},
    {"Ring reduce-scatter", "ring-reducescatter"}};

QString algorithmName(CollectiveKind k) {
    for (const auto& [name, key] : kAlgorithms) {
        if (key.toStdString() == toString(k))
            return name.section(" (", 0, 0);
    }
    return {};
}

} // namespace

CollectivesPage::CollectivesPage(SessionDocument* doc, QWidget* parent)
    : Page(parent), doc_(doc), panel_(new CalculatorPanel(this)), form_(new SessionForm(doc)),
      main_(new RingView), compare_(new RingView), figures_(new QStandardItemModel(this)),
      links_(new QStandardItemModel(this)), narration_(new QLabel) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(panel_);

    form_->addSection("Collective");
    form_->addChoice(
        "algorithm", "Algorithm", "How the GPUs combine their buffers", kAlgorithms,
        [](const Session& s) { return qs(toString(s.collectives.algorithm)); },
        [](Session& s, const QString& k) {
            s.collectives.algorithm = collectiveFromString(k.toStdString());
        });
    form_->addInt(
        "ranks", "GPUs (N)", "GPUs taking part", 2, 16,
        [](const Session& s) { return s.collectives.ranks; },
        [](Session& s, int v) { s.collectives.ranks = v; }, true);
    form_->addInt(
        "gpus-per-node", "GPUs per node",
        "For the two-level algorithm and for which links are "
        "network links",
        1, 16, [](const Session& s) { return s.collectives.links.gpusPerNode; },
        [](Session& s, int v) { s.collectives.links.gpusPerNode = v; });
    form_->addDouble(
        "size", "Size S",
        "Bytes as nccl-tests counts them: the buffer for all-reduce, the "
        "output for all-gather, the input for reduce-scatter",
        0.001, 1e5, 3, " GB", [](const Session& s) { return s.collectives.sizeGB; },
        [](Session& s, double v) { s.collectives.sizeGB = v; });
    form_->addSection("Links");
    form_->addDouble(
        "intra-bw", "In a node", "Bandwidth per GPU per direction inside a node", 0.1, 1e5, 1,
        " GB/s", [](const Session& s) { return s.collectives.links.intraBandwidth / 1e9; },
        [](Session& s, double v) { s.collectives.links.intraBandwidth = v * 1e9; });
    form_->addDouble(
        "intra-latency", "Latency in a node", "Per step, per message", 0, 1e6, 1, " us",
        [](const Session& s) { return s.collectives.links.intraLatency / 1e-6; },
        [](Session& s, double v) { s.collectives.links.intraLatency = v * 1e-6; });
    form_->addDouble(
        "inter-bw", "Across nodes", "Bandwidth per GPU per direction across nodes", 0.1, 1e5, 1,
        " GB/s", [](const Session& s) { return s.collectives.links.interBandwidth / 1e9; },
        [](Session& s, double v) { s.collectives.links.interBandwidth = v * 1e9; });
    form_->addDouble(
        "inter-latency", "Latency across nodes", "Per step, per message", 0, 1e6, 1, " us",
        [](const Session& s) { return s.collectives.links.interLatency / 1e-6; },
        [](Session& s, double v) { s.collectives.links.interLatency = v * 1e-6; });
    panel_->setControls(form_);

    auto* player = new PlayerControls(&clock_);
    connect(player->addButton("Step back"), &QPushButton::clicked, this,
            &CollectivesPage::stepBack);
    connect(player->addButton("Step forward"), &QPushButton::clicked, this,
            &CollectivesPage::stepForward);
    player->addTrailing(new QWidget, 1); // the buttons keep their size, left
    connect(&clock_, &AnimationClock::positionChanged, this, &CollectivesPage::showPosition);
    narration_->setObjectName("narration");
    narration_->setWordWrap(true);
    narration_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    narration_->setMinimumHeight(2 * narration_->fontMetrics().lineSpacing() + 4);
    narration_->setAlignment(Qt::AlignLeft | Qt::AlignTop);

    main_->setTitle("Collective");
    compare_->setTitle("Collective (compared)");
    auto* picture = new QWidget;
    auto* v = new QVBoxLayout(picture);
    v->setContentsMargins(0, 0, 0, 0);
    v->addWidget(player);
    v->addWidget(narration_);
    auto* views = new QHBoxLayout;
    views->addWidget(main_, 1);
    views->addWidget(compare_, 1);
    v->addLayout(views, 3);
    auto* tables = new QHBoxLayout;
    for (auto [model, stretch] : {std::pair{figures_, 3}, {links_, 2}}) {
        QTableView* table = makeTable(model);
        table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
        tables->addWidget(table, stretch);
    }
    v->addLayout(tables, 1);
    panel_->setPicture(picture);
    panel_->setLesson(
        id(), "Each box is one GPU's buffer in numbered chunks; a chunk fills up as it comes to "
              "hold the sum of more GPUs' data, and arrows show the step under way. Both "
              "algorithms take a step every half second; their captions keep the time the steps "
              "take on the modelled links. <b>Try:</b> step through the ring's reduce-scatter "
              "until each GPU owns one whole chunk; raise N and watch the ring's time stay nearly "
              "flat while the naive one's grows; set GPUs per node below N, then choose the "
              "two-level algorithm.");

    connect(doc_, &SessionDocument::changed, this, &CollectivesPage::sessionChanged);
    form_->refresh();
    refresh();
}

std::vector<Chart*> CollectivesPage::charts() const {
    return {main_, compare_};
}

std::vector<std::pair<QString, QAbstractItemModel*>> CollectivesPage::tables() const {
    return {{"Collective figures", figures_}, {"Bytes per GPU", links_}};
}

void CollectivesPage::refresh() {
    const CollectivesLesson& c = doc_->session().collectives;
    const double bytes = c.sizeGB * 1e9;
    // The comparison: the naive algorithm, or the ring when the naive one is chosen.
    const CollectiveKind other = c.algorithm == CollectiveKind::NaiveAllReduce
                                     ? CollectiveKind::RingAllReduce
                                     : CollectiveKind::NaiveAllReduce;
    QString problem;
    const auto build = [&](CollectiveKind kind, RingView* view, CollectiveTiming& timing) {
        try {
            const CollectivePlan plan = buildCollective({kind, c.ranks, c.links.gpusPerNode});
            timing = timeCollective(plan, bytes, c.links);
            view->setPlan(plan,
                          QString("%1: %2, algbw %3/s, busbw %4/s")
                              .arg(algorithmName(kind), qs(formatSeconds(timing.seconds)),
                                   qs(formatBytes(timing.algbw)), qs(formatBytes(timing.busbw))));
            view->show();
            return true;
        } catch (const InputError& e) {
            problem = algorithmName(kind) + ": " + qs(e.what());
            timing = {};
            view->hide();
            return false;
        }
    };
    const bool ok = build(c.algorithm, main_, mainTiming_);
    build(other, compare_, compareTiming_);
    narrations_.clear();
    if (ok) {
        for (const std::string& line :
             narrateCollective(buildCollective({c.algorithm, c.ranks, c.links.gpusPerNode})))
            narrations_ << qs(line);
    }
    clock_.setPlaySeconds(kSecondsPerStep * std::max(1, stepsShown()));

    std::vector<QList<QStandardItem*>> rows;
    for (const auto& [kind, t] : {std::pair{c.algorithm, &mainTiming_}, {other, &compareTiming_}}) {
        if (t->seconds <= 0)
            continue;
        rows.push_back(
            {figureItem(algorithmName(kind), 0),
             figureItem(QString::number(t->stepSeconds.size()), double(t->stepSeconds.size())),
             figureItem(qs(formatSeconds(t->seconds)), t->seconds,
                        "Sum over steps of the slowest link's latency plus the busiest GPU's "
                        "bytes over its link bandwidth (alpha-beta model)"),
             figureItem(qs(formatBytes(t->algbw) + "/s"), t->algbw,
                        "algbw = S / time (nccl-tests, doc/PERFORMANCE.md)"),
             figureItem(qs(formatBytes(t->busbw) + "/s"), t->busbw,
                        "busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather and "
                        "reduce-scatter (nccl-tests, doc/PERFORMANCE.md)"),
             figureItem(qs(formatBytes(t->busiestRank)), t->busiestRank,
                        "Bytes the busiest GPU sends over the whole collective"),
             figureItem(qs(formatBytes(t->busiestLink)), t->busiestLink,
                        "Bytes over the busiest GPU-to-GPU link over the whole collective")});
    }
    setRows(
        figures_,
        {"Algorithm", "Steps", "Time", "algbw", "busbw", "Most sent by a GPU", "Most over a link"},
        std::move(rows));
    std::vector<QList<QStandardItem*>> perGpu;
    for (std::size_t r = 0; r < mainTiming_.sentPerRank.size(); ++r)
        perGpu.push_back(
            {figureItem(QString("GPU %1").arg(r), double(r)),
             figureItem(qs(formatBytes(mainTiming_.sentPerRank[r])), mainTiming_.sentPerRank[r]),
             figureItem(r < compareTiming_.sentPerRank.size()
                            ? qs(formatBytes(compareTiming_.sentPerRank[r]))
                            : QString("-"),
                        r < compareTiming_.sentPerRank.size() ? compareTiming_.sentPerRank[r]
                                                              : 0.0)});
    setRows(links_,
            {"GPU", "Sends, " + algorithmName(c.algorithm), "Sends, " + algorithmName(other)},
            std::move(perGpu));

    // The closed forms from the planner, beside the step-by-step times.
    const int n = c.ranks;
    const double bw = c.links.intraBandwidth, alpha = c.links.intraLatency;
    std::vector<Explanation> explanations;
    Explanation ring;
    ring.label = "Ring all-reduce, one node (closed form)";
    ring.display = formatSeconds(ringAllReduceSeconds(bytes, n, bw, alpha));
    ring.formula = "t = 2 (n-1) alpha + 2 (n-1)/n x S / B";
    ring.substituted = "2 x " + std::to_string(n - 1) + " x " + formatSeconds(alpha) + " + 2 x " +
                       std::to_string(n - 1) + "/" + std::to_string(n) + " x " +
                       formatBytes(bytes) + " / " + formatBytes(bw) + "/s = " + ring.display;
    ring.source = "Patarasuk & Yuan 2009 (bandwidth-optimal all-reduce); lesson 1, ring all-reduce";
    explanations.push_back(ring);
    Explanation naive;
    naive.label = "Naive all-reduce: bytes through GPU 0";
    naive.display = formatBytes(naiveAllReduceRootBytes(bytes, n));
    naive.formula = "2 (n-1) x S: GPU 0 receives every buffer, then sends the sum to each";
    naive.substituted =
        "2 x " + std::to_string(n - 1) + " x " + formatBytes(bytes) + " = " + naive.display;
    naive.source = "lesson 1, ring all-reduce (the bottleneck it removes)";
    explanations.push_back(naive);
    Explanation bus;
    bus.label = "Bus bandwidth";
    bus.display = formatBytes(mainTiming_.busbw) + "/s";
    bus.formula = "busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter); "
                  "algbw = S / t";
    bus.substituted = formatBytes(mainTiming_.algbw) + "/s x " +
                      formatNumber(busBandwidthFactor(c.algorithm, n), 4) + " = " + bus.display;
    bus.source = "nccl-tests, doc/PERFORMANCE.md";
    explanations.push_back(bus);
    panel_->setExplanations(explanations);

    if (!ok) {
        panel_->setVerdict(problem.toHtmlEscaped(), VerdictLevel::Bad);
    } else {
        QString text =
            QString("%1 of %2 on %3 GPUs: %4 (busbw %5/s).")
                .arg(algorithmName(c.algorithm), qs(formatBytes(bytes)))
                .arg(n)
                .arg(qs(formatSeconds(mainTiming_.seconds)), qs(formatBytes(mainTiming_.busbw)));
        if (compareTiming_.seconds > 0)
            text += QString(" %1 takes %2, %3x as long.")
                        .arg(algorithmName(other), qs(formatSeconds(compareTiming_.seconds)),
                             qs(formatNumber(compareTiming_.seconds / mainTiming_.seconds, 3)));
        panel_->setVerdict(text.toHtmlEscaped(), VerdictLevel::Good);
    }
    showPosition(clock_.position());
}

int CollectivesPage::stepsShown() const {
    // An algorithm that cannot take the shape has no timing and no steps to show.
    return int(std::max(mainTiming_.stepSeconds.size(), compareTiming_.stepSeconds.size()));
}

QString CollectivesPage::viewStatus(const RingView* view, const CollectiveTiming& t) const {
    if (t.stepSeconds.empty())
        return {};
    // Modelled time so far: the steps done and the share of the one under way.
    const double at = view->time();
    const auto done = std::size_t(std::min(double(t.stepSeconds.size()), std::floor(at)));
    double seconds = 0;
    for (std::size_t i = 0; i < done; ++i)
        seconds += t.stepSeconds[i];
    if (done < t.stepSeconds.size())
        seconds += (at - double(done)) * t.stepSeconds[done];
    const int step = view->currentStep(), total = view->stepCount();
    const QString where =
        step >= total ? QString("done in %1 steps").arg(total)
                      : QString("step %1 of %2, %3").arg(step + 1).arg(total).arg(view->phase());
    return QString("%1: %2 of %3 (modelled)")
        .arg(where, qs(formatSeconds(seconds)), qs(formatSeconds(t.seconds)));
}

void CollectivesPage::showPosition(double fraction) {
    const double steps = fraction * stepsShown();
    main_->setTime(steps);
    compare_->setTime(steps);
    main_->setStatus(viewStatus(main_, mainTiming_));
    compare_->setStatus(viewStatus(compare_, compareTiming_));
    narration_->setText(stepText());
}

QString CollectivesPage::stepText() const {
    const int s = main_->currentStep();
    if (narrations_.isEmpty())
        return {};
    return narrations_[std::min(s, int(narrations_.size()) - 1)];
}

void CollectivesPage::stepForward() {
    pause();
    const int total = stepsShown();
    if (total <= 0)
        return;
    // To the end of the step under way (a step's end is when its result shows).
    const double steps = fraction() * total;
    setFraction(std::min(double(total), std::floor(steps + 1e-9) + 1) / total);
}

void CollectivesPage::stepBack() {
    pause();
    const int total = stepsShown();
    if (total <= 0)
        return;
    const double steps = fraction() * total;
    setFraction(std::max(0.0, std::ceil(steps - 1e-9) - 1) / total);
}

bool CollectivesPage::showView(const QString& view) {
    if (view.isEmpty())
        return true;
    bool ok = false;
    const int steps = view.startsWith("step-") ? view.mid(5).toInt(&ok) : -1;
    // The chosen algorithm's steps: none when it cannot take the shape (its view keeps the
    // last plan it could draw, hidden).
    const int mainSteps = int(mainTiming_.stepSeconds.size());
    if (!ok || steps < 0 || steps > mainSteps)
        return false; // past the last step there is nothing more to show
    pause();
    setFraction(double(steps) / std::max(1, stepsShown()));
    return true;
}

QString CollectivesPage::viewsHelp() const {
    return QString("step-0 to step-%1 (the steps of the algorithm shown)")
        .arg(mainTiming_.stepSeconds.size());
}

QString CollectivesPage::chartCaption(const QString&) const {
    const CollectivesLesson& c = doc_->session().collectives;
    return QString("%1 of %2 on %3 GPUs, %4 per node; links %5/s + %6 in a node, %7/s + %8 "
                   "across nodes (alpha-beta model)")
        .arg(algorithmName(c.algorithm), qs(formatBytes(c.sizeGB * 1e9)))
        .arg(c.ranks)
        .arg(c.links.gpusPerNode)
        .arg(qs(formatBytes(c.links.intraBandwidth)), qs(formatSeconds(c.links.intraLatency)),
             qs(formatBytes(c.links.interBandwidth)), qs(formatSeconds(c.links.interLatency)));
}

QString CollectivesPage::reportHtml() const {
    return {}; // a lesson about collective algorithms, not part of the session's plan
}

} // namespace shardscope
