#include "memory_page.h"

#include "animated_charts.h"
#include "calculator_panel.h"
#include "chart_style.h"
#include "controls/plan_controls.h"
#include "core/units.h"
#include "memory_chart.h"
#include "page_support.h"
#include "plan/layout.h"
#include "plan/memory_summary.h"
#include "series_chart.h"
#include "session_document.h"

#include <QComboBox>
#include <QGridLayout>
#include <QHeaderView>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>

namespace shardscope {

namespace {

const std::vector<FigureId> kFigures = {
    FigureId::ParamsTotal,  FigureId::ParamsPerGpu, FigureId::MemParameters,
    FigureId::MemGradients, FigureId::MemOptimizer, FigureId::MemActivations,
    FigureId::MemTemporary, FigureId::MemOverhead,  FigureId::MemTotal};

// The category figures in MemoryChart's stacking order.
const std::array<FigureId, MemoryChart::kCategories> kCategoryFigures = {
    FigureId::MemParameters,  FigureId::MemGradients, FigureId::MemOptimizer,
    FigureId::MemActivations, FigureId::MemTemporary, FigureId::MemOverhead};

// Stages worth a bar: all of them for short pipelines, else the ends and the middle.
std::vector<int> stagesToShow(int pp) {
    if (pp <= 8) {
        std::vector<int> all(pp);
        for (int i = 0; i < pp; ++i)
            all[i] = i;
        return all;
    }
    return {0, 1, pp / 2, pp - 2, pp - 1};
}

// The GPUs of one data-parallel group (the first 16 of a larger one: they all hold the same),
// each with its own shard of the weights, gradients and optimizer state solid and the copies
// that every other GPU of the group also holds hatched, from the planner's figures.
void showHoldings(AnimatedBarChart& chart, const PlanInputs& in) {
    const ZeroHoldings h = zeroHoldings(in, in.parallel.zero);
    const int shown = std::min(h.groupSize, 16);
    QStringList gpus;
    for (int g = 0; g < shown; ++g)
        gpus << QString("GPU %1").arg(g);
    if (shown < h.groupSize)
        gpus.back() += QString(" (of %1)").arg(h.groupSize);
    // `removedBy`: the ZeRO stage that shards the category (optimizer 1, gradients 2, weights 3).
    const auto sets = [&](const QString& name, int color, const ModelStateHolding& m,
                          int removedBy) {
        const QString shard = QString("1/%1 of the whole, by this GPU alone").arg(h.groupSize);
        return std::vector<BarSet>{
            {name + " (own)",
             detail::categoryColor(color),
             Qt::SolidPattern,
             std::vector<double>(std::size_t(shown), m.ownShard),
             shard,
             {}},
            {name + " (copies)",
             detail::categoryColor(color),
             Qt::BDiagPattern,
             std::vector<double>(std::size_t(shown), m.copy()),
             QString("held by all %1 GPUs of the group alike: ZeRO-%2 shards it away")
                 .arg(h.groupSize)
                 .arg(removedBy),
             {}}};
    };
    std::vector<BarSet> all;
    for (const auto& [name, color, m, removedBy] : {std::tuple{QString("Weights"), 0, h.weights, 3},
                                                    {QString("Gradients"), 1, h.gradients, 2},
                                                    {QString("Optimizer"), 2, h.optimizer, 1}}) {
        const auto two = sets(name, color, m, removedBy);
        all.insert(all.end(), two.begin(), two.end());
    }
    chart.setData(gpus, all, "per GPU");
    chart.setHeading(
        in.parallel.hybridShard()
            ? QString("ZeRO-%1 over the %2 GPUs of a shard group (hybrid sharding: %3 copies)")
                  .arg(h.zeroStage)
                  .arg(h.groupSize)
                  .arg(in.parallel.zeroReplicas())
            : QString("ZeRO-%1 over the %2 GPUs of a data-parallel group (dp x cp)")
                  .arg(h.zeroStage)
                  .arg(h.groupSize));
}

} // namespace

MemoryPage::MemoryPage(SessionDocument* doc, QWidget* parent)
    : Page(parent), doc_(doc), panel_(new CalculatorPanel(this)), form_(new SessionForm(doc)),
      chart_(new MemoryChart), zeroChart_(new SeriesChart),
      holdings_(new AnimatedBarChart(AnimatedBarChart::Direction::Up, true)),
      share_(new ShareChart), breakdown_(new QStandardItemModel(this)),
      table_(makeTable(breakdown_)), tabs_(new QTabWidget) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(panel_);

    forwardImportRequests(addModelControls(*form_));
    form_->addSection("Hardware");
    addGpuControl(*form_);
    addPrecisionControls(*form_);
    addLayoutControls(*form_, LayoutFollows::Layout, true);
    addTrainingControls(*form_, false);
    panel_->setControls(form_);

    chart_->setTitle("Memory per GPU");
    zeroChart_->setTitle("Memory per GPU vs number of GPUs");
    zeroChart_->setAxes("GPUs", ValueKind::Plain, true, "Memory per GPU", ValueKind::Bytes);

    auto* picture = new QWidget;
    auto* grid = new QGridLayout(picture);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->addWidget(chart_, 0, 0);
    grid->addWidget(zeroChart_, 0, 1);
    holdings_->setTitle("What each GPU holds of the model state");
    share_->setTitle("Memory per GPU by category");
    tabs_->addTab(holdings_, "What each GPU holds");
    tabs_->addTab(share_, "Share by category");
    tabs_->addTab(table_, "Breakdown");
    grid->addWidget(tabs_, 1, 0, 1, 2);
    grid->setRowStretch(0, 3);
    grid->setRowStretch(1, 2);
    panel_->setPicture(picture);
    panel_->setLesson(
        id(),
        "Each bar is one GPU of a pipeline stage, stacked by what it holds: weights, gradients "
        "and optimizer state (the model state, which ZeRO shards over dp) and activations "
        "(which recompute, tensor and sequence parallelism shrink); the line is the GPU's "
        "memory. The chart beside it follows the model state as dp grows for each ZeRO "
        "stage; below, what each GPU of a data-parallel group holds (its own shard solid, the "
        "copies every other GPU also holds hatched) and each category's share. <b>Try:</b> "
        "raise the ZeRO stage from 0 to 3 and watch the copies go, optimizer state first; set "
        "recompute to full and watch the activations shrink; double the micro "
        "batch and watch them double.");

    connect(doc_, &SessionDocument::changed, this, &MemoryPage::sessionChanged);
    form_->refresh();
    refresh();
}

std::vector<Chart*> MemoryPage::charts() const {
    return {chart_, zeroChart_, holdings_, share_};
}

bool MemoryPage::showView(const QString& view) {
    if (view.isEmpty())
        return true;
    const QStringList views = {"holdings", "share", "breakdown"};
    if (!views.contains(view))
        return false;
    tabs_->setCurrentIndex(int(views.indexOf(view)));
    return true;
}

QString MemoryPage::viewsHelp() const {
    return "holdings, share, breakdown";
}

std::vector<std::pair<QString, QAbstractItemModel*>> MemoryPage::tables() const {
    return {{"Memory breakdown", breakdown_}};
}

void MemoryPage::refresh() {
    const PlanInputs& in = doc_->inputs();
    const Estimate& e = doc_->estimate();

    // Bars per pipeline stage, with the formula and source of each category on hover.
    std::vector<MemoryBar> bars;
    for (int stage : stagesToShow(std::max(1, in.parallel.pp))) {
        const QString label = in.parallel.pp > 1 ? QString("stage %1").arg(stage) : "each GPU";
        bars.push_back({label, memoryForStage(in, stage)});
    }
    std::array<QString, MemoryChart::kCategories> tips;
    for (int i = 0; i < MemoryChart::kCategories; ++i)
        tips[i] = explanationTooltip(explain(in, e, kCategoryFigures[i]));
    chart_->setCategoryTooltips(tips);
    chart_->setBars(std::move(bars), e.capacity, qs(in.cluster.gpu.name));

    // ZeRO 0-3 as the data-parallel degree grows, the rest of the layout kept.
    std::vector<int> dps;
    for (int dp = 1; dp <= 1024; dp *= 2)
        dps.push_back(dp);
    std::vector<Series> series;
    for (int zero = 0; zero <= 3; ++zero) {
        Series s{QString("ZeRO-%1").arg(zero), {}, {}};
        for (const SweepPoint& p : memoryOverDataParallel(in, zero, dps)) {
            s.x.push_back(p.gpus);
            s.y.push_back(p.bytes);
        }
        series.push_back(std::move(s));
    }
    zeroChart_->setSeries(std::move(series));
    zeroChart_->setThreshold(e.capacity, qs(in.cluster.gpu.name));

    showHoldings(*holdings_, in);
    std::vector<Segment> shares;
    for (FigureId id : kCategoryFigures) {
        const Explanation x = explain(in, e, id);
        shares.push_back({qs(x.label), x.value, explanationTooltip(x)});
    }
    share_->setSegments(shares);

    // The breakdown table: category, bytes, share, what it is made of.
    std::vector<QList<QStandardItem*>> rows;
    const double total = std::max(1.0, e.memory.total());
    for (FigureId id : kCategoryFigures) {
        const Explanation x = explain(in, e, id);
        const QString tip = explanationTooltip(x);
        rows.push_back({figureItem(qs(x.label), 0, tip), figureItem(qs(x.display), x.value, tip),
                        figureItem(qs(formatPercent(x.value / total)), x.value / total, tip),
                        figureItem(qs(x.substituted), 0, tip)});
    }
    const Explanation sum = explain(in, e, FigureId::MemTotal);
    rows.push_back(
        {figureItem("Total", 0, explanationTooltip(sum)),
         figureItem(qs(sum.display), sum.value, explanationTooltip(sum)),
         figureItem(qs(formatPercent(sum.value / std::max(1.0, e.capacity))),
                    sum.value / std::max(1.0, e.capacity), "Share of the GPU's capacity"),
         figureItem(qs(sum.substituted), 0, explanationTooltip(sum))});
    if (e.memory.cpuOffloaded > 0)
        rows.push_back({figureItem("Offloaded to CPU", 0),
                        figureItem(qs(formatBytes(e.memory.cpuOffloaded)), e.memory.cpuOffloaded),
                        figureItem("host memory", 0),
                        figureItem("optimizer state in host memory", 0)});
    const bool reshaped = breakdown_->rowCount() != int(rows.size());
    setRows(breakdown_, {"Category", "Per GPU", "Share", "Formula"}, std::move(rows));
    if (reshaped)
        table_->resizeColumnsToContents();

    // The verdict in words; layout rules that matter for memory are listed under it (a world
    // size that does not fill the cluster is the Explorer's business).
    const MemoryVerdict v = memoryVerdict(in, e);
    std::vector<Violation> problems;
    for (const Violation& x : e.violations) {
        if (x.rule != "world-size")
            problems.push_back(x);
    }
    QString text = qs(v.text).toHtmlEscaped();
    if (!v.fits && v.minimumGpus > 0)
        text += "<br><small><tt>" + qs(v.formula).toHtmlEscaped() + "</tt></small>";
    text += violationsHtml(problems);
    const VerdictLevel level = !v.fits ? VerdictLevel::Bad
                               : !problems.empty() || v.free < 0.1 * v.capacity
                                   ? VerdictLevel::Warning
                                   : VerdictLevel::Good;
    panel_->setVerdict(text, level);
    panel_->setExplanations(explainAll(in, e, kFigures));
}

QString MemoryPage::reportHtml() const {
    const PlanInputs& in = doc_->inputs();
    const Estimate& e = doc_->estimate();
    QString html = "<h2>Memory per GPU</h2>";
    html += "<p>" + qs(memoryVerdict(in, e).text).toHtmlEscaped() + "</p>";
    html += "<p><img src=\"chart:0\" width=\"480\"></p>";
    html += tableHtml(*breakdown_); // each category with its formula and numbers
    return html;
}

} // namespace shardscope
