#include "explorer_page.h"

#include "animated_charts.h"
#include "breakdown_bar.h"
#include "calculator_panel.h"
#include "chart_style.h"
#include "controls/plan_controls.h"
#include "core/units.h"
#include "layout_scatter.h"
#include "memory_chart.h"
#include "page_support.h"
#include "plan/layer_comm.h"
#include "session_document.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>

namespace shardscope {

namespace {

constexpr int kCandidateRole = Qt::UserRole + 1;

} // namespace

ExplorerPage::ExplorerPage(SessionDocument* doc, QWidget* parent)
    : Page(parent), doc_(doc), panel_(new CalculatorPanel(this)), form_(new SessionForm(doc)),
      tabs_(new QTabWidget), figures_(new QStandardItemModel(this)),
      comm_(new QStandardItemModel(this)), stepBar_(new BreakdownBar),
      memoryChart_(new MemoryChart), clusterMap_(new ClusterMap), hoverLabel_(new QLabel),
      mapWarning_(new QLabel), searchButton_(new QPushButton("Search all layouts")),
      cancelButton_(new QPushButton("Cancel")), progress_(new QProgressBar),
      searchStatus_(new QLabel), tpInNode_(new QCheckBox("TP inside a node")),
      zeroBubble_(new QCheckBox("Try zero-bubble")), results_(new QStandardItemModel(this)),
      sorted_(new QSortFilterProxyModel(this)), resultsView_(nullptr), scatter_(new LayoutScatter),
      layerChart_(new AnimatedBarChart(AnimatedBarChart::Direction::Right, true)),
      layerOps_(new QStandardItemModel(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(panel_);

    forwardImportRequests(addModelControls(*form_));
    addClusterControls(*form_);
    addGpuControl(*form_);
    addTrainingControls(*form_, true);
    addPrecisionControls(*form_);
    addLayoutControls(*form_, LayoutFollows::Cluster, true);
    addKernelControls(*form_);
    addOverlapControls(*form_);
    panel_->setControls(form_);

    tabs_->addTab(buildOverview(), "Overview");
    tabs_->addTab(buildClusterView(), "Cluster map");
    tabs_->addTab(buildSearchView(), "Search");
    tabs_->addTab(buildLayerView(), "Inside a layer");
    panel_->setPicture(tabs_);
    panel_->setLesson(
        id(), "The session's layout on its cluster: the step time split into compute, exposed "
              "communication per axis, pipeline bubble and optimizer, the memory of its most "
              "loaded stage, and the traffic of each parallel axis. The cluster map places every "
              "GPU in its node; the search tries every layout and plots them all, memory per GPU "
              "against throughput. <b>Try:</b> open the cluster map and colour it by TP group, "
              "then raise tp past the GPUs per node and see the group leave its node; run the "
              "search and click a point on the Pareto front to make it the session's layout.");

    connect(doc_, &SessionDocument::changed, this, &ExplorerPage::sessionChanged);
    connect(&worker_, &SearchWorker::progress, this, [this](int serial, double f) {
        if (serial == serial_)
            progress_->setValue(int(f * 1000));
    });
    connect(&worker_, &SearchWorker::finished, this, &ExplorerPage::showResult);
    form_->refresh();
    refresh();
}

QWidget* ExplorerPage::buildOverview() {
    auto* w = new QWidget;
    auto* h = new QHBoxLayout(w);
    auto* figuresView = makeTable(figures_);
    figuresView->setObjectName("figures");
    // The formula column wraps, each row as tall as its formula: read whole, never elided.
    figuresView->setWordWrap(true);
    figuresView->setTextElideMode(Qt::ElideNone);
    figuresView->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    figuresView->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    figuresView->horizontalHeader()->setStretchLastSection(true);
    h->addWidget(figuresView, 1);
    auto* right = new QVBoxLayout;
    stepBar_->setTitle("Step time");
    memoryChart_->setTitle("Memory per GPU");
    right->addWidget(new QLabel("<b>Step time</b>: where each step's seconds go"));
    right->addWidget(stepBar_);
    right->addWidget(memoryChart_, 2);
    right->addWidget(new QLabel("<b>Communication per axis</b> (per step, per GPU)"));
    auto* commView = makeTable(comm_);
    commView->setObjectName("communication");
    right->addWidget(commView, 1);
    h->addLayout(right, 1);
    return w;
}

QWidget* ExplorerPage::buildClusterView() {
    auto* w = new QWidget;
    auto* v = new QVBoxLayout(w);
    auto* top = new QHBoxLayout;
    auto* colorBy = new QComboBox;
    colorBy->setObjectName("color-by");
    for (ColorBy c : {ColorBy::TpGroup, ColorBy::PpStage, ColorBy::DpReplica, ColorBy::CpRank})
        colorBy->addItem(toDisplayString(c), int(c));
    connect(colorBy, &QComboBox::activated, this, [this, colorBy](int i) {
        clusterMap_->setColorBy(ColorBy(colorBy->itemData(i).toInt()));
    });
    top->addWidget(new QLabel("Colour by"));
    top->addWidget(colorBy);
    top->addStretch();
    top->addWidget(hoverLabel_);
    v->addLayout(top);
    mapWarning_->setWordWrap(true);
    mapWarning_->setObjectName("map-warning");
    v->addWidget(mapWarning_);
    clusterMap_->setTitle("Cluster map");
    v->addWidget(clusterMap_, 1);
    connect(clusterMap_, &ClusterMap::gpuHovered, this, [this](int rank) {
        hoverLabel_->setText(rank >= 0 ? clusterMap_->describeGpu(rank) : QString());
    });
    return w;
}

QWidget* ExplorerPage::buildSearchView() {
    auto* w = new QWidget;
    auto* v = new QVBoxLayout(w);
    auto* bar = new QHBoxLayout;
    searchButton_->setObjectName("search");
    cancelButton_->setObjectName("cancel-search");
    cancelButton_->setEnabled(false);
    progress_->setRange(0, 1000);
    progress_->setTextVisible(false);
    tpInNode_->setChecked(true);
    tpInNode_->setToolTip("Reject layouts whose TP groups span nodes");
    zeroBubble_->setToolTip("Try ZB-H1 in 1F1B's place (1F1B's memory, a third of its bubble), "
                            "and ZB-2p with \"Optimizer post-validation\" on (twice the "
                            "activations, no bubble once there are 2p microbatches)");
    bar->addWidget(searchButton_);
    bar->addWidget(cancelButton_);
    bar->addWidget(tpInNode_);
    bar->addWidget(zeroBubble_);
    bar->addWidget(progress_, 1);
    v->addLayout(bar);
    searchStatus_->setWordWrap(true);
    searchStatus_->setText("Search every dp x tp x pp x cp x ZeRO x recompute x micro batch "
                           "layout of this model on this cluster for this global batch.");
    v->addWidget(searchStatus_);

    sorted_->setSourceModel(results_);
    sorted_->setSortRole(Qt::UserRole);
    resultsView_ = makeTable(sorted_);
    resultsView_->setObjectName("results");
    resultsView_->setSortingEnabled(true);
    resultsView_->setToolTip("Click a layout to apply it");
    scatter_->setTitle("Layouts: memory per GPU vs throughput");
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(resultsView_);
    split->addWidget(scatter_);
    v->addWidget(split, 1);

    connect(searchButton_, &QPushButton::clicked, this, &ExplorerPage::startSearch);
    connect(cancelButton_, &QPushButton::clicked, this, &ExplorerPage::cancelSearch);
    connect(resultsView_, &QTableView::clicked, this,
            [this](const QModelIndex& i) { applyResult(i.row()); });
    connect(scatter_, &LayoutScatter::candidateClicked, this,
            [this](int index) { applyCandidate(std::size_t(index)); });
    return w;
}

std::vector<Chart*> ExplorerPage::charts() const {
    return {stepBar_, memoryChart_, clusterMap_, scatter_, layerChart_};
}

std::vector<std::pair<QString, QAbstractItemModel*>> ExplorerPage::tables() const {
    return {{"Figures", figures_},
            {"Communication per axis", comm_},
            {"Search results", sorted_},
            {"Inside a layer", layerOps_}};
}

QWidget* ExplorerPage::buildLayerView() {
    // The chart keeps a row per op readable (showLayer sets its height) and scrolls, with the
    // table of the same ops below.
    auto* area = new QScrollArea;
    area->setWidgetResizable(true);
    area->setFrameShape(QFrame::NoFrame);
    auto* w = new QWidget;
    auto* v = new QVBoxLayout(w);
    layerChart_->setTitle("Collectives inside one transformer layer");
    v->addWidget(layerChart_);
    auto* table = makeTable(layerOps_);
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table->setMinimumHeight(220);
    v->addWidget(table, 1);
    area->setWidget(w);
    return area;
}

// One layer's ops in the order they run for one microbatch, each collective with its message
// and what each GPU sends for it: where the TP and CP rows of the Overview come from.
void ExplorerPage::showLayer(const PlanInputs& in) {
    const std::vector<LayerOp> ops = shardscope::layerOps(in);
    // Under Megatron's block method only the first layers of each virtual stage recompute.
    const QString recompute =
        in.parallel.recomputeLayers > 0
            ? QString("recompute (first %1 layers)").arg(in.parallel.recomputeLayers)
            : QString("recompute");
    const auto pass = [&](const LayerOp& op) {
        return op.recompute ? recompute : QString(op.backward ? "backward" : "forward");
    };
    QStringList names;
    BarSet tp{"TP / SP collective",
              detail::categoryColor(0),
              Qt::SolidPattern,
              {},
              "Megatron-LM tensor parallelism (Shoeybi et al. 2019) and its sequence parallelism "
              "(Korthikanti et al. 2022)",
              {}};
    BarSet cp{"CP ring pass",
              detail::categoryColor(1),
              Qt::SolidPattern,
              {},
              "Ring attention (Liu et al. 2023)",
              {}};
    std::vector<QList<QStandardItem*>> rows;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const LayerOp& op = ops[i];
        const QString prefix = op.recompute ? recompute + ": " : op.backward ? "bwd: " : "";
        names << QString("%1. %2%3").arg(i + 1).arg(prefix, qs(op.name));
        const bool isTp = op.collective && op.axis == Axis::TP;
        const bool isCp = op.collective && op.axis == Axis::CP;
        tp.values.push_back(isTp ? op.sentPerRank : 0.0);
        cp.values.push_back(isCp ? op.sentPerRank : 0.0);
        tp.notes.push_back(qs(op.why));
        cp.notes.push_back(qs(op.why));
        const QString hops = op.hops > 1 ? QString(" x %1 hops").arg(op.hops) : QString();
        rows.push_back(
            {figureItem(QString::number(i + 1), double(i + 1)), figureItem(pass(op), 0),
             figureItem(qs(op.name), 0),
             figureItem(op.collective ? qs(formatBytes(op.bytes)) + hops : QString(), op.bytes,
                        op.collective ? "The message: S as nccl-tests counts it" : QString()),
             figureItem(op.collective ? qs(formatBytes(op.sentPerRank)) : QString(), op.sentPerRank,
                        "Bytes each GPU sends: (n-1)/n x S for an all-gather or a "
                        "reduce-scatter, 2(n-1)/n x S for an all-reduce, one message per hop "
                        "for a ring pass"),
             figureItem(qs(op.why), 0)});
    }
    setRows(layerOps_, {"#", "Pass", "Op", "Message", "Each GPU sends", "What for"},
            std::move(rows));
    layerChart_->setData(names, {tp, cp}, "sent per GPU, one microbatch");
    layerChart_->setMinimumHeight(130 + 18 * int(ops.size())); // every op's name on its row
    const ParallelConfig& p = in.parallel;
    layerChart_->setHeading(
        ops.empty()
            ? QString("A bare parameter count has no layers to show")
            : QString("tp %1%2, cp %3: %4 sent per GPU per layer and microbatch")
                  .arg(p.tp)
                  .arg(p.sequenceParallel && p.tp > 1 ? " with SP" : "")
                  .arg(p.cp)
                  .arg(qs(formatBytes(std::accumulate(tp.values.begin(), tp.values.end(), 0.0) +
                                      std::accumulate(cp.values.begin(), cp.values.end(), 0.0)))));
}

bool ExplorerPage::showView(const QString& view) {
    const QStringList views = {"overview", "cluster", "search", "layer"};
    if (view.isEmpty())
        return true;
    const int i = int(views.indexOf(view));
    if (i < 0)
        return false;
    tabs_->setCurrentIndex(i);
    return true;
}

void ExplorerPage::refresh() {
    const PlanInputs& in = doc_->inputs();
    const Estimate& e = doc_->estimate();

    std::vector<QList<QStandardItem*>> rows;
    const std::vector<Explanation> all = explainAll(in, e, allFigures());
    for (const Explanation& x : all) {
        const QString tip = explanationTooltip(x);
        rows.push_back({figureItem(qs(x.label), 0, tip), figureItem(qs(x.display), x.value, tip),
                        figureItem(qs(x.substituted), 0, tip)});
    }
    const bool reshaped = figures_->rowCount() != int(rows.size());
    setRows(figures_, {"Figure", "Value", "Formula with your numbers"}, std::move(rows));
    if (reshaped) { // setRows cleared the model and with it the column widths
        auto* view = findChild<QTableView*>("figures");
        view->setColumnWidth(0, 130);
        view->setColumnWidth(1, 72);
    }
    showLayer(in);

    rows.clear();
    const FigureId commFigures[] = {FigureId::CommDP, FigureId::CommTP, FigureId::CommPP,
                                    FigureId::CommCP, FigureId::CommEP};
    static_assert(std::size(commFigures) == kAxes.size(), "a figure for every axis");
    for (Axis a : kAxes) {
        const AxisComm& c = e.axis(a);
        const QString tip = explanationTooltip(explain(in, e, commFigures[int(a)]));
        rows.push_back(
            {figureItem(qs(toString(a)), 0, tip),
             figureItem(QString::number(c.groupSize), c.groupSize, tip),
             figureItem(c.groupSize <= 1 ? "-"
                        : c.crossesNodes ? "network " + qs(formatBytes(c.bandwidth) + "/s")
                                         : "NVLink " + qs(formatBytes(c.bandwidth) + "/s"),
                        c.bandwidth, tip),
             figureItem(qs(formatBytes(c.bytes)), c.bytes, tip),
             figureItem(qs(formatSeconds(c.seconds)), c.seconds, tip),
             figureItem(qs(formatSeconds(c.window)), c.window, tip),
             figureItem(qs(formatSeconds(c.exposed)), c.exposed, tip)});
    }
    setRows(comm_, {"Axis", "Group", "Link", "Bytes", "On the wire", "Hidden behind", "Exposed"},
            std::move(rows));

    std::vector<Segment> parts;
    for (const StepPart& p : stepTimeParts(e))
        parts.push_back(
            {qs(p.label), p.seconds,
             p.label == "Compute"  ? explanationTooltip(explain(in, e, FigureId::ComputeTime))
             : p.label == "Bubble" ? explanationTooltip(explain(in, e, FigureId::Bubble))
             : p.label == "Host-bound wait"
                 ? explanationTooltip(explain(in, e, FigureId::HostBound))
                 : QString()});
    stepBar_->setSegments(std::move(parts), ValueKind::Seconds);

    memoryChart_->setBars({{QString("stage %1").arg(e.worstStage), e.memory}}, e.capacity,
                          qs(in.cluster.gpu.name));

    clusterMap_->setLayout(in.cluster, in.parallel);
    mapWarning_->setText(clusterMap_->warning());
    mapWarning_->setVisible(!clusterMap_->warning().isEmpty());

    // The verdict: what this layout achieves, or what is wrong with it.
    QString text;
    VerdictLevel level = VerdictLevel::Good;
    if (!e.valid()) {
        text = "<b>This layout breaks " + QString::number(e.violations.size()) +
               (e.violations.size() == 1 ? " rule" : " rules") + ".</b>" +
               violationsHtml(e.violations);
        level = VerdictLevel::Bad;
    } else if (!e.fits) {
        text = "<b>Does not fit:</b> " + qs(formatBytes(e.memory.total())) + " per GPU on stage " +
               QString::number(e.worstStage) + ", over the " + qs(describeCapacity(in, e)) +
               ". Try ZeRO, recompute, more TP or PP, or the Search tab.";
        level = VerdictLevel::Bad;
    } else {
        const QString mfu =
            e.mfuAssumed ? QString("<b>MFU %1 assumed</b> (modelled: %2, step %3)")
                               .arg(qs(formatPercent(e.mfu)), qs(formatPercent(e.modelledMfu)),
                                    qs(formatSeconds(e.modelledStepTime)))
                         : QString("<b>MFU %1</b>").arg(qs(formatPercent(e.mfu)));
        text = QString("%1 tokens/s, %2 per GPU, %3; step %4, bubble %5. %6 of %7 per GPU.")
                   .arg(qs(formatCount(e.tokensPerSecond)), qs(formatRate(e.tflopsPerGpu)), mfu,
                        qs(formatSeconds(e.stepTime)), qs(formatPercent(e.bubbleFraction)),
                        qs(formatBytes(e.memory.total())), qs(describeCapacity(in, e)));
        if (e.timeToTrain > 0)
            text += QString("<br>%1 tokens in %2 of training (%3 wall time at %4 useful under "
                            "failures), %5 GPU-hours, cost %6.")
                        .arg(qs(formatCount(in.train.trainTokens)),
                             qs(formatSeconds(e.timeToTrain)), qs(formatSeconds(e.wallTimeToTrain)),
                             qs(formatPercent(e.trainingFraction)), qs(formatCount(e.gpuHours)),
                             qs(formatCount(e.cost)));
        if (!clusterMap_->warning().isEmpty()) {
            text += "<br>" + clusterMap_->warning().toHtmlEscaped();
            level = VerdictLevel::Warning;
        }
    }
    panel_->setVerdict(text, level);
    panel_->setExplanations(all);
}

void ExplorerPage::startSearch() {
    SearchRequest request;
    request.inputs = doc_->inputs();
    request.space.tpWithinNode = tpInNode_->isChecked();
    request.space.tryZeroBubble = zeroBubble_->isChecked();
    serial_ = worker_.start(request);
    progress_->setValue(0);
    searchButton_->setEnabled(false);
    cancelButton_->setEnabled(true);
    searchStatus_->setText("Searching...");
}

void ExplorerPage::cancelSearch() {
    worker_.cancel();
    searchStatus_->setText("Cancelling...");
}

void ExplorerPage::showResult(int serial, const SearchResultPtr& result) {
    if (serial != serial_)
        return; // a superseded search
    searchButton_->setEnabled(true);
    cancelButton_->setEnabled(false);
    if (result->cancelled) {
        searchStatus_->setText("Search cancelled; the previous results are kept.");
        emit searchFinished(true);
        return;
    }
    result_ = result;
    progress_->setValue(1000);

    QString rejected;
    for (const auto& [rule, n] : result->rejected)
        rejected += QString("%1 %2, ").arg(qs(rule)).arg(n);
    rejected.chop(2);
    searchSummary_ =
        QString("%1 layouts considered, %2 valid, %3 fit. Rejected: %4.")
            .arg(qs(formatCount(double(result->considered))),
                 qs(formatCount(double(result->evaluated))),
                 qs(formatCount(double(result->fitting))), rejected.isEmpty() ? "none" : rejected);
    searchStatus_->setText(searchSummary_ + " Click a row or a point to apply it.");

    results_->clear();
    results_->setHorizontalHeaderLabels({"#", "Layout", "Memory per GPU", "Tokens/s", "MFU",
                                         "Step time", "dp", "tp", "pp", "cp", "ep", "etp", "ZeRO"});
    for (std::size_t i = 0; i < result->top.size(); ++i) {
        const Candidate& c = result->top[i];
        QList<QStandardItem*> row = {
            figureItem(QString::number(i + 1), double(i + 1)),
            figureItem(qs(layoutSummary(c.config)), double(i)),
            figureItem(qs(formatBytes(c.memory)), c.memory),
            figureItem(qs(formatCount(c.tokensPerSecond)), c.tokensPerSecond),
            figureItem(qs(formatPercent(c.mfu)), c.mfu),
            figureItem(qs(formatSeconds(c.stepTime)), c.stepTime),
            figureItem(QString::number(c.config.dp), c.config.dp),
            figureItem(QString::number(c.config.tp), c.config.tp),
            figureItem(QString::number(c.config.pp), c.config.pp),
            figureItem(QString::number(c.config.cp), c.config.cp),
            figureItem(QString::number(c.config.ep), c.config.ep),
            figureItem(QString::number(c.config.expertTp()), c.config.expertTp()),
            figureItem(QString::number(c.config.zero), c.config.zero)};
        row[0]->setData(qulonglong(i), kCandidateRole);
        results_->appendRow(row);
    }
    resultsView_->sortByColumn(0, Qt::AscendingOrder); // best first until the user sorts
    resultsView_->resizeColumnsToContents();
    scatter_->setCandidates(result->all, paretoFront(result->all), doc_->estimate().capacity);
    emit searchFinished(false);
}

void ExplorerPage::applyResult(int row) {
    if (!result_ || row < 0 || row >= sorted_->rowCount())
        return;
    const QModelIndex source = sorted_->mapToSource(sorted_->index(row, 0));
    const auto i = std::size_t(results_->data(source, kCandidateRole).toULongLong());
    if (i >= result_->top.size())
        return;
    const ParallelConfig config = result_->top[i].config;
    doc_->edit("Apply layout " + qs(layoutSummary(config)),
               [&](Session& s) { s.parallel = config; });
}

void ExplorerPage::applyCandidate(std::size_t index) {
    if (!result_ || index >= result_->all.size())
        return;
    const ParallelConfig config = result_->all[index].config;
    doc_->edit("Apply layout " + qs(layoutSummary(config)),
               [&](Session& s) { s.parallel = config; });
    scatter_->setHighlighted(int(index));
}

QString ExplorerPage::reportHtml() const {
    QString html = "<h2>Step time and communication</h2><p>" + panel_->verdictText() + "</p>";
    html += "<p><img src=\"chart:0\" width=\"600\"></p>";
    html += tableHtml(*comm_);
    html += "<h3>Placement on the cluster</h3><p><img src=\"chart:2\" width=\"420\"></p>";
    if (result_) {
        // The results model, fastest first, whatever column the table is sorted by now.
        html += "<h3>Search: the 10 fastest layouts that fit</h3><p><small>" +
                searchSummary_.toHtmlEscaped() + "</small></p>" + tableHtml(*results_, 10);
    }
    // The appendix a design doc wants: every figure with its formula, the numbers in it and
    // where it comes from (sources numbered once, cited by number).
    const PlanInputs& in = doc_->inputs();
    QStringList sources;
    QString rows;
    for (const Explanation& x : explainAll(in, doc_->estimate(), allFigures())) {
        if (!figureApplies(doc_->estimate(), x.id))
            continue;
        const QString source = qs(x.source);
        qsizetype cite = sources.indexOf(source);
        if (cite < 0) {
            sources << source;
            cite = sources.size() - 1;
        }
        rows += "<tr><td>" + qs(x.label).toHtmlEscaped() + "</td><td>" +
                qs(x.display).toHtmlEscaped() + "</td><td>" + qs(x.substituted).toHtmlEscaped() +
                QString("</td><td>[%1]</td></tr>").arg(cite + 1);
    }
    // Fixed column widths: a value printed a few characters longer must not reflow the table.
    html += "<h3>Every figure, with its formula and source</h3><table border=\"1\" "
            "cellspacing=\"0\" cellpadding=\"2\" width=\"100%\"><tr><th width=\"22%\">Figure"
            "</th><th width=\"11%\">Value</th><th width=\"60%\">Formula with the plan's "
            "numbers</th><th width=\"7%\">Source</th></tr>" +
            rows + "</table><p><small>";
    for (qsizetype i = 0; i < sources.size(); ++i)
        html += QString("[%1] %2<br>").arg(i + 1).arg(sources[i].toHtmlEscaped());
    return html + "</small></p>";
}

} // namespace shardscope
