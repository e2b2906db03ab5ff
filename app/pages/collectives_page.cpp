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
      links_(new QStandardItemModel(this)), stepLabel_(new QLabel) {
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
    player->addTrailing(stepLabel_, 1);
    connect(&clock_, &AnimationClock::positionChanged, this, &CollectivesPage::showPosition);

    main_->setTitle("Collective");
    compare_->setTitle("Collective (compared)");
    auto* picture = new QWidget;
    auto* v = new QVBoxLayout(picture);
    v->setContentsMargins(0, 0, 0, 0);
    v->addWidget(player);
    auto* views = new QHBoxLayout;
    views->addWidget(main_, 1);
    views->addWidget(compare_, 1);
    v->addLayout(views, 3);
    auto* tables = new QHBoxLayout;
    tables->addWidget(makeTable(figures_), 3);
    tables->addWidget(makeTable(links_), 2);
    v->addLayout(tables, 1);
    panel_->setPicture(picture);

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
    setRows(figures_,
            {"Algorithm", "Steps", "Time", "algbw", "busbw", "Busiest GPU sends", "Busiest link"},
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
            {"GPU", "sends (" + algorithmName(c.algorithm) + ")",
             "sends (" + algorithmName(other) + ")"},
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

double CollectivesPage::stepsAt(const CollectiveTiming& t, double seconds) const {
    double at = 0;
    for (std::size_t i = 0; i < t.stepSeconds.size(); ++i) {
        const double d = t.stepSeconds[i];
        if (seconds < at + d)
            return double(i) + (d > 0 ? (seconds - at) / d : 0.0);
        at += d;
    }
    return double(t.stepSeconds.size());
}

void CollectivesPage::showPosition(double fraction) {
    const double seconds = fraction * std::max(mainTiming_.seconds, compareTiming_.seconds);
    main_->setTime(stepsAt(mainTiming_, seconds));
    compare_->setTime(stepsAt(compareTiming_, seconds));
    stepLabel_->setText(stepText());
}

QString CollectivesPage::stepText() const {
    const int s = main_->currentStep(), total = main_->stepCount();
    if (s >= total)
        return QString("done: %1 steps").arg(total);
    return QString("%1, step %2 of %3").arg(main_->phase()).arg(s + 1).arg(total);
}

void CollectivesPage::stepForward() {
    pause();
    const double total = std::max(mainTiming_.seconds, compareTiming_.seconds);
    if (total <= 0)
        return;
    // The end of the main algorithm's current step.
    double at = 0;
    for (double d : mainTiming_.stepSeconds) {
        at += d;
        if (at / total > fraction() + 1e-9) {
            setFraction(at / total);
            return;
        }
    }
    setFraction(1.0);
}

void CollectivesPage::stepBack() {
    pause();
    const double total = std::max(mainTiming_.seconds, compareTiming_.seconds);
    if (total <= 0)
        return;
    double at = 0, previous = 0;
    for (double d : mainTiming_.stepSeconds) {
        if (at / total >= fraction() - 1e-9)
            break;
        previous = at;
        at += d;
    }
    setFraction(previous / total);
}

bool CollectivesPage::showView(const QString& view) {
    if (view.isEmpty())
        return true;
    bool ok = false;
    const int steps = view.startsWith("step-") ? view.mid(5).toInt(&ok) : -1;
    if (!ok || steps < 0 || steps > int(mainTiming_.stepSeconds.size()))
        return false; // past the last step there is nothing more to show

    setFraction(0);
    for (int i = 0; i < steps; ++i)
        stepForward();
    return true;
}

QString CollectivesPage::viewsHelp() const {
    return QString("step-0 to step-%1 (the steps of the algorithm shown)")
        .arg(mainTiming_.stepSeconds.size());
}

QString CollectivesPage::reportHtml() const {
    return "<h2>Collectives</h2><p>" + panel_->verdictText() +
           "</p><p><img src=\"chart:0\" width=\"420\"> <img src=\"chart:1\" width=\"420\"></p>" +
           panel_->formulaHtml();
}

} // namespace shardscope
