// The Explorer page: live figures follow every control, the cluster map warns about TP across
// nodes, and the search runs in the background, cancels, sorts and applies.
#include "animated_charts.h"
#include "app_test_support.h"
#include "breakdown_bar.h"
#include "calculator_panel.h"
#include "cluster_map.h"
#include "layout_scatter.h"
#include "pages/explorer_page.h"
#include "session_document.h"

#include <QProgressBar>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>

using namespace shardscope;
using namespace shardscope::test;

namespace {

struct Fixture {
    SessionDocument doc;
    ExplorerPage page{&doc};
    Fixture() { page.show(); } // hidden pages refresh only when shown
    SessionForm* form() { return page.form(); }
    double value(const QString& label) { return figure(page.figures(), label); }
};

} // namespace

class TestExplorerPage : public QObject {
    Q_OBJECT
private slots:
    void showsEveryFigureWithItsFormula() {
        Fixture f;
        QCOMPARE(f.page.figures()->rowCount(), int(allFigures().size()));
        QVERIFY(f.value("MFU") > 0.3 && f.value("MFU") < 0.7);
        QVERIFY(tooltip(f.page.figures(), "Step time").contains("="));
        QVERIFY(f.page.panel()->verdictText().contains("MFU"));
        // The step-time bar adds up to the step time.
        double sum = 0;
        for (const Segment& s : f.page.stepBreakdown()->segments())
            sum += s.value;
        QVERIFY(std::abs(sum - f.value("Step time")) < 1e-9 * sum);
        QCOMPARE(f.page.communication()->rowCount(), 5); // DP, TP, PP, CP and EP
    }

    // The host time of a dropless MoE layer is a control of the MoE model only: long enough,
    // the step waits for the host (the figure and the step bar say how long); 0 takes the roof
    // away, and token dropping, which has no roof, turns the control off.
    void moeHostTimeSetsTheHostRoof() {
        Fixture f;
        QVERIFY(!f.form()->control("moe-host-time")->isEnabled());
        setInt(f.form(), "experts", 16);
        setInt(f.form(), "top-k", 2);
        QVERIFY(f.form()->control("moe-host-time")->isEnabled());
        setDouble(f.form(), "moe-host-time", 200);
        QCOMPARE(f.doc.session().moeLayerHostSeconds, 0.2);
        QVERIFY(f.value("Host-bound wait") > 0);
        const double step = f.value("Step time");
        setDouble(f.form(), "moe-host-time", 0);
        QCOMPARE(f.value("Host-bound wait"), 0.0);
        QVERIFY(f.value("Step time") < step);
        setDouble(f.form(), "capacity-factor", 1.5);
        QVERIFY(!f.form()->control("moe-host-time")->isEnabled());
    }

    // A user makes the model a mixture of experts and splits the experts: the MoE fields keep
    // the model one a session file takes, ep and the capacity factor wake up with experts, EP's
    // all-to-alls appear and each GPU holds fewer weights.
    void mixtureOfExpertsFieldsAndExpertParallelism() {
        Fixture f;
        QVERIFY(!f.form()->control("ep")->isEnabled());
        QVERIFY(!f.form()->control("top-k")->isEnabled());
        setInt(f.form(), "experts", 16);
        const MoeSpec& moe = f.doc.session().model.moe;
        QCOMPARE(moe.experts, 16);
        QCOMPARE(moe.topK, 1); // at least one expert a token
        QVERIFY(f.form()->control("ep")->isEnabled());
        QVERIFY(f.form()->control("capacity-factor")->isEnabled());
        setInt(f.form(), "top-k", 2);
        QCOMPARE(f.doc.session().model.moe.topK, 2);
        QCOMPARE(f.value("Expert-parallel communication"), 0.0);
        const double weights = f.value("Weights");
        setInt(f.form(), "ep", 8);
        QCOMPARE(f.doc.session().parallel.ep, 8);
        QVERIFY(f.value("Expert-parallel communication") > 0);
        QVERIFY(f.value("Weights") < weights);
        QCOMPARE(f.page.communication()->item(4, 0)->text(), QString("EP"));
        const double a2a = f.value("Expert-parallel communication");
        setDouble(f.form(), "capacity-factor", 1.5);
        QCOMPARE(f.doc.session().parallel.expertCapacityFactor, 1.5);
        QVERIFY(f.value("Expert-parallel communication") > a2a);
        // EP overlap (combined 1F1B) hides the all-to-alls behind another microbatch: the step
        // gets shorter, the all-to-alls' total stays.
        QVERIFY(f.form()->control("ep-comm-overlap")->isEnabled());
        const double a2aTotal = f.value("Expert-parallel communication");
        const double step = f.value("Step time");
        setBool(f.form(), "ep-comm-overlap", true);
        QVERIFY(f.doc.session().parallel.epCommOverlap);
        QCOMPARE(f.value("Expert-parallel communication"), a2aTotal);
        QVERIFY(f.value("Step time") < step);
        // Expert tensor parallelism apart from tp: etp 1 keeps each expert whole on a tp rank.
        QVERIFY(f.form()->control("etp")->isEnabled());
        QVERIFY(f.doc.session().parallel.tp > 1);
        const double splitWeights = f.value("Weights");
        setInt(f.form(), "etp", 1);
        QCOMPARE(f.doc.session().parallel.etp, 1);
        QVERIFY(f.value("Weights") > splitWeights);
        // DeepSeek's dense first layers: each trades its experts for one dense MLP, and they
        // are never all the layers (a model file refuses that).
        QVERIFY(f.form()->control("first-dense-layers")->isEnabled());
        const double params = f.doc.estimate().params.total;
        setInt(f.form(), "first-dense-layers", 2);
        QCOMPARE(f.doc.session().model.moe.firstDenseLayers, 2);
        const ParamCount c = f.doc.estimate().params;
        QCOMPARE(c.total, params - 2 * (c.mlpPerLayer - c.denseMlpPerLayer));
        // A multi-token prediction module: one more MoE layer and a projection to train.
        const double withoutMtp = f.doc.estimate().params.total;
        setInt(f.form(), "mtp-modules", 1);
        QCOMPARE(f.doc.session().model.mtpModules, 1);
        QCOMPARE(f.doc.estimate().params.total, withoutMtp + f.doc.estimate().params.mtpPerModule);
        QCOMPARE(f.doc.estimate().params.mtpPerModule, c.attentionPerLayer + c.mlpPerLayer +
                                                           c.normsPerLayer + 2.0 * 8192 * 8192 +
                                                           3 * 8192.0);
        setInt(f.form(), "mtp-modules", 0);
        setInt(f.form(), "layers", 2);
        QCOMPARE(f.doc.session().model.moe.firstDenseLayers, 1);
        QCOMPARE(f.doc.estimate().params.total - f.doc.estimate().params.embeddings -
                     f.doc.estimate().params.lmHead,
                 2 * (c.attentionPerLayer + c.normsPerLayer) + c.mlpPerLayer + c.denseMlpPerLayer +
                     c.finalNorm);
        setInt(f.form(), "experts", 0); // dense again: no top-k, no shared experts
        QCOMPARE(f.doc.session().model.moe.topK, 0);
        QVERIFY(!f.form()->control("ep")->isEnabled());
        QVERIFY(!f.form()->control("etp")->isEnabled());
        QCOMPARE(f.doc.session().parallel.ep, 1); // nothing left that the form cannot undo
        QCOMPARE(f.doc.session().parallel.etp, 0);
        QVERIFY(!f.doc.session().parallel.epCommOverlap);
        QCOMPARE(f.doc.session().model.moe.firstDenseLayers, 0);
        QVERIFY(!f.form()->control("first-dense-layers")->isEnabled());
    }

    // Full recompute of only some layers of each stage (Megatron's block method): the control
    // wakes with full recompute, and activations and recompute work land between none and full.
    void recomputedLayersSitBetweenNoneAndFullRecompute() {
        Fixture f;
        QVERIFY(!f.form()->control("recompute-layers")->isEnabled());
        choose(f.form(), "recompute", "none");
        const double noneActivations = f.value("Activations");
        const double noneWork = f.doc.estimate().hardwareFlopsPerToken;
        choose(f.form(), "recompute", "full");
        QVERIFY(f.form()->control("recompute-layers")->isEnabled());
        const double fullActivations = f.value("Activations");
        const double fullWork = f.doc.estimate().hardwareFlopsPerToken;
        setInt(f.form(), "recompute-layers", 10); // of the 20 layers on each of 4 stages
        QCOMPARE(f.doc.session().parallel.recomputeLayers, 10);
        QVERIFY(f.doc.estimate().violations.empty());
        const double half = f.value("Activations");
        QVERIFY(half > fullActivations && half < noneActivations);
        // Half the layers rerun their forward: half of full recompute's extra work.
        const double work = f.doc.estimate().hardwareFlopsPerToken;
        QVERIFY(std::abs(work - (noneWork + fullWork) / 2) < 1e-9 * work);
        // "Inside a layer" says which layers rerun their forward.
        int partial = 0;
        for (int row = 0; row < f.page.layerOps()->rowCount(); ++row)
            partial += f.page.layerOps()->item(row, 1)->text() == "recompute (first 10 layers)";
        QVERIFY(partial > 0);
        choose(f.form(), "recompute", "selective"); // the count means nothing there: it resets
        QCOMPARE(f.doc.session().parallel.recomputeLayers, 0);
        QVERIFY(!f.form()->control("recompute-layers")->isEnabled());
    }

    // A model with multi-head latent attention (as a DeepSeek config imports) has keys and values
    // for every head: the KV heads control is off and follows the heads.
    void latentAttentionKeepsKvHeadsWithTheHeads() {
        Fixture f;
        QVERIFY(f.form()->control("kv-heads")->isEnabled());
        f.doc.edit("latent attention", [](Session& s) {
            s.model.mla = {1536, 512, 128, 64, 128};
            s.model.kvHeads = s.model.heads;
        });
        QVERIFY(!f.form()->control("kv-heads")->isEnabled());
        setInt(f.form(), "heads", 32);
        QCOMPARE(f.doc.session().model.heads, 32);
        QCOMPARE(f.doc.session().model.kvHeads, 32);
    }

    void clusterControlsMoveThroughputAndCost() {
        Fixture f;
        const double tps = f.value("Throughput");
        setInt(f.form(), "nodes", 16);
        QCOMPARE(f.doc.session().parallel.dp, 4); // dp follows the cluster
        QVERIFY(f.value("Throughput") > 1.5 * tps);

        const double dpTime = figure(f.page.communication(), "DP", 4);
        setDouble(f.form(), "inter-bw", 12.5);
        QVERIFY(figure(f.page.communication(), "DP", 4) > 2 * dpTime);

        const double cost = f.value("Cost to train");
        setDouble(f.form(), "price", 4);
        QVERIFY(std::abs(f.value("Cost to train") - 2 * cost) < 1e-6 * cost * 4);

        const double time = f.value("Time to train");
        setDouble(f.form(), "tokens", 30000);
        QVERIFY(std::abs(f.value("Time to train") - 2 * time) < 1e-6 * time * 2);

        const double fraction = f.value("Expected training-time fraction");
        setDouble(f.form(), "mtbf", 4000);
        QVERIFY(f.value("Expected training-time fraction") < fraction);
    }

    // Time to train scales as 1 / MFU (step = model FLOPs / (GPUs x peak x MFU)); the verdict
    // says the MFU is assumed, the search still ranks by the modelled speed, and "modelled"
    // brings the step model back.
    void assumedMfuSetsTheTimeToTrain() {
        Fixture f;
        const double modelled = f.value("MFU"), time = f.value("Time to train");
        setDouble(f.form(), "assume-mfu", 25);
        QVERIFY(std::abs(f.value("MFU") - 0.25) < 1e-12);
        const double expected = time * modelled / 0.25;
        QVERIFY(std::abs(f.value("Time to train") - expected) < 1e-9 * expected);
        QVERIFY(f.page.panel()->verdictText().contains("assumed"));
        QVERIFY(f.value("HFU") >= f.value("MFU"));
        double sum = 0;
        for (const Segment& s : f.page.stepBreakdown()->segments())
            sum += s.value;
        QVERIFY(std::abs(sum - f.value("Step time")) < 1e-9 * sum);
        setDouble(f.form(), "assume-mfu", 0);
        QCOMPARE(f.value("MFU"), modelled);
        QCOMPARE(f.value("Time to train"), time);
    }

    // ZB-2p from the schedule control: with "Optimizer post-validation" its bubble goes and the
    // step shortens; ZB-H1's does not move.
    void postValidationRemovesZeroBubble2psBubble() {
        Fixture f;
        QVERIFY(f.doc.session().parallel.pp > 1);
        choose(f.form(), "schedule", "zb-2p");
        QVERIFY(f.doc.session().parallel.schedule == PipelineSchedule::ZeroBubble2p);
        const double step = f.value("Step time"), bubble = f.value("Pipeline bubble");
        QVERIFY(bubble > 0);
        setBool(f.form(), "post-validation", true);
        QVERIFY(f.doc.session().optimizerPostValidation);
        QCOMPARE(f.value("Pipeline bubble"), 0.0);
        QVERIFY(f.value("Step time") < step);
        choose(f.form(), "schedule", "zero-bubble");
        const double h1 = f.value("Step time");
        setBool(f.form(), "post-validation", false);
        QCOMPARE(f.value("Step time"), h1);
    }

    // Eager PyTorch (no torch.compile): the Llama layer's memory-bound ops move about three
    // times the bytes of fused kernels, and the step pays for it; back to fused, back to the
    // same plan.
    void eagerElementwiseSlowsTheStep() {
        Fixture f;
        QVERIFY(f.doc.session().parallel.fusedElementwise);
        const double bytes = f.value("Elementwise traffic");
        const double step = f.value("Step time");
        QVERIFY(bytes > 0);
        setBool(f.form(), "fused-elementwise", false);
        QVERIFY(!f.doc.session().parallel.fusedElementwise);
        QVERIFY(f.value("Elementwise traffic") > 2.5 * bytes);
        QVERIFY(f.value("Step time") > step);
        QVERIFY(tooltip(f.page.figures(), "Elementwise traffic").contains("RMSNorm"));
        setBool(f.form(), "fused-elementwise", true);
        QCOMPARE(f.value("Step time"), step);
    }

    // Counting FLOPs as PaLM does (the whole attention square) raises MFU, not the step time.
    void flopCountMovesMfuNotTheStep() {
        Fixture f;
        const double mfu = f.value("MFU"), step = f.value("Step time");
        choose(f.form(), "flops-convention", "palm");
        QVERIFY(f.doc.session().flopsConvention == FlopsConvention::Palm);
        QVERIFY(f.value("MFU") > mfu);
        QCOMPARE(f.value("Step time"), step);
        choose(f.form(), "flops-convention", "causal");
        QCOMPARE(f.value("MFU"), mfu);
    }

    void layoutControlsMoveBubbleAndStep() {
        Fixture f;
        const double bubble = f.value("Pipeline bubble");
        choose(f.form(), "schedule", "interleaved");
        QCOMPARE(f.doc.session().parallel.vpp, 2);
        QVERIFY(f.value("Pipeline bubble") < bubble);
        const double step = f.value("Step time");
        setInt(f.form(), "global-batch", 1024);
        QVERIFY(f.value("Step time") > 1.8 * step);
        setInt(f.form(), "tp", 4); // dp follows: 64 / (4 x 4) = 4
        QCOMPARE(f.doc.session().parallel.dp, 4);
        QCOMPARE(f.doc.session().cluster.worldSize(), 64);
    }

    void clusterMapWarnsWhenTpCrossesNodes() {
        Fixture f;
        QVERIFY(f.page.clusterMap()->warning().isEmpty());
        QCOMPARE(f.page.clusterMap()->gpuCount(), 64);
        setInt(f.form(), "tp", 16);
        QVERIFY(!f.page.clusterMap()->warning().isEmpty());
        QVERIFY(f.page.clusterMap()->tpCrossesNodes());
        QVERIFY(f.page.communication()->item(1, 2)->text().startsWith("network"));
        QVERIFY(f.page.panel()->verdictLevel() != VerdictLevel::Good);
        QVERIFY(f.page.showView("cluster"));
        QVERIFY(!f.page.showView("nonsense"));
    }

    // Hybrid sharding from the Explorer: groups of 1 of the 2 data-parallel GPUs keep whole
    // weights on each (twice full sharding's); a group that does not divide dp is refused.
    void shardGroupShardsOverGroupsOrIsRefusedWithItsFix() {
        Fixture f;
        QCOMPARE(f.doc.session().parallel.dp, 2);
        choose(f.form(), "zero", "3");
        const double sharded = f.value("Weights");
        setInt(f.form(), "shard-group", 1);
        QCOMPARE(f.doc.session().parallel.shardGroup, 1);
        QVERIFY(f.page.panel()->verdictLevel() != VerdictLevel::Bad);
        QVERIFY(std::abs(f.value("Weights") - 2 * sharded) < 1e-9 * sharded);
        setInt(f.form(), "shard-group", 3);
        QVERIFY(f.page.panel()->verdictLevel() == VerdictLevel::Bad);
        QVERIFY2(f.page.panel()->verdictText().contains("shard_group = 2"),
                 qPrintable(f.page.panel()->verdictText()));
    }

    // The framework's overlap settings: TP's traffic hidden behind the GEMMs shortens the step
    // and the explanation says so; gradients reduced after the backward lengthen it; TP overlap
    // without sequence parallelism is refused with its fix.
    void overlapControlsMoveTheStepAndSayWhatWasAssumed() {
        Fixture f;
        setBool(f.form(), "sp", true);
        QVERIFY(f.doc.session().parallel.tp > 1);
        const double step = f.value("Step time");
        QVERIFY(
            tooltip(f.page.figures(), "Tensor-parallel communication").contains("not overlapped"));
        setBool(f.form(), "tp-comm-overlap", true);
        QVERIFY(f.doc.session().parallel.tpCommOverlap);
        QVERIFY2(f.value("Step time") < step, qPrintable(QString::number(f.value("Step time"))));
        QVERIFY(tooltip(f.page.figures(), "Tensor-parallel communication")
                    .contains("behind the GEMMs"));
        setBool(f.form(), "tp-comm-overlap", false);
        QCOMPARE(f.value("Step time"), step);

        setBool(f.form(), "overlap-grad-reduce", false);
        QVERIFY(!f.doc.session().parallel.overlapGradReduce);
        QVERIFY(f.value("Step time") > step);
        QVERIFY(
            tooltip(f.page.figures(), "Data-parallel communication").contains("after backward"));
        setBool(f.form(), "overlap-grad-reduce", true);

        setBool(f.form(), "tp-comm-overlap", true);
        setBool(f.form(), "sp", false);
        QVERIFY(f.page.panel()->verdictLevel() == VerdictLevel::Bad);
        QVERIFY2(f.page.panel()->verdictText().contains("sequence_parallel on"),
                 qPrintable(f.page.panel()->verdictText()));
    }

    // FSDP's backward prefetch from the Explorer: only under ZeRO-3 with the gathers overlapped;
    // gathering after each layer's gradients lengthens the step and the tooltip says why.
    void backwardPrefetchWaitsForTheGradientsUnderZero3() {
        Fixture f;
        QVERIFY(f.doc.session().parallel.dp > 1);
        QVERIFY(!f.form()->control("backward-prefetch")->isEnabled());
        choose(f.form(), "zero", "3");
        QVERIFY(f.form()->control("backward-prefetch")->isEnabled());
        const double step = f.value("Step time");
        choose(f.form(), "backward-prefetch", "post");
        QVERIFY(f.doc.session().parallel.backwardPrefetch == BackwardPrefetch::Post);
        QVERIFY2(f.value("Step time") > step, qPrintable(QString::number(f.value("Step time"))));
        QVERIFY(tooltip(f.page.figures(), "Data-parallel communication").contains("BACKWARD_POST"));
        setBool(f.form(), "overlap-param-gather", false);
        QVERIFY(!f.form()->control("backward-prefetch")->isEnabled());
        setBool(f.form(), "overlap-param-gather", true);
        choose(f.form(), "backward-prefetch", "pre");
        QCOMPARE(f.value("Step time"), step);
    }

    // Choosing a GPU brings its generation's network (A100: 200 Gb/s HDR a GPU, H100: 400 Gb/s
    // NDR), unless the network was set by hand.
    void theNetworkFollowsTheGpuUnlessSetByHand() {
        Fixture f;
        QCOMPARE(f.doc.session().cluster.gpu.id, std::string("h100-sxm"));
        QCOMPARE(f.doc.session().cluster.interBandwidth, 50e9);
        choose(f.form(), "gpu", "a100-80gb");
        QCOMPARE(f.doc.session().cluster.interBandwidth, 25e9);
        setDouble(f.form(), "inter-bw", 40);
        choose(f.form(), "gpu", "h200");
        QCOMPARE(f.doc.session().cluster.interBandwidth, 40e9);
    }

    void invalidLayoutListsTheRulesWithFixes() {
        Fixture f;
        setInt(f.form(), "tp", 3);
        QVERIFY(f.page.panel()->verdictLevel() == VerdictLevel::Bad);
        QVERIFY2(f.page.panel()->verdictText().contains("Fix:"),
                 qPrintable(f.page.panel()->verdictText()));
    }

    void searchFinishesSortsAndApplies() {
        Fixture f;
        setInt(f.form(), "nodes", 2); // keep it quick: 16 GPUs
        choose(f.form(), "model", "preset:llama3-8b");
        QSignalSpy done(&f.page, &ExplorerPage::searchFinished);
        f.page.startSearch();
        QVERIFY(f.page.searchRunning());
        QVERIFY(done.wait(60000));
        QCOMPARE(done.first().first().toBool(), false);
        const SearchResultPtr r = f.page.searchResult();
        QVERIFY(r && !r->top.empty());
        QCOMPARE(f.page.results()->rowCount(), int(r->top.size()));
        // The experts' tp beside tp: a dense model's follows tp (the column shows what runs).
        QCOMPARE(f.page.results()->horizontalHeaderItem(11)->text(), QString("etp"));
        for (int row = 0; row < f.page.results()->rowCount(); ++row)
            QCOMPARE(f.page.results()->item(row, 11)->text(),
                     f.page.results()->item(row, 7)->text());
        QCOMPARE(f.page.scatter()->pointCount(), r->all.size());
        QCOMPARE(f.page.searchProgress()->value(), 1000);

        // Sort by throughput ascending: the first row is now the slowest of the top layouts
        // (layouts with equal throughput may come in either order, so compare throughput).
        f.page.resultsView()->sortByColumn(3, Qt::AscendingOrder);
        f.page.applyResult(0);
        QCOMPARE(f.doc.estimate().tokensPerSecond, r->top.back().tokensPerSecond);
        const std::string slowest = layoutSummary(f.doc.session().parallel);
        f.page.resultsView()->sortByColumn(3, Qt::DescendingOrder);
        f.page.applyResult(0);
        QCOMPARE(f.doc.estimate().tokensPerSecond, r->top.front().tokensPerSecond);
        QCOMPARE(f.value("Throughput"), r->top.front().tokensPerSecond);
        f.doc.undoStack()->undo();
        QCOMPARE(layoutSummary(f.doc.session().parallel), slowest);

        // A click on a scatter point applies that layout.
        emit f.page.scatter()->candidateClicked(0);
        QCOMPARE(layoutSummary(f.doc.session().parallel), layoutSummary(r->all[0].config));
    }

    // Inside a layer: the ops of one layer with their collectives; summed over microbatches and
    // layers they are the Overview's TP and CP traffic, and they follow SP and cp.
    void insideALayerAddsUpToTheAxisTraffic() {
        Fixture f;
        QVERIFY(f.page.showView("layer"));
        AnimatedBarChart* chart = f.page.layerChart();
        const auto sum = [&](int set) {
            double total = 0;
            for (int c = 0; c < chart->categoryCount(); ++c)
                total += chart->value(set, c);
            return total;
        };
        const auto named = [&](const QString& what) {
            int n = 0;
            for (int c = 0; c < chart->categoryCount(); ++c)
                n += chart->category(c).contains(what);
            return n;
        };
        const auto perStep = [&] {
            return double(f.doc.inputs().parallel.microbatches()) *
                   f.doc.estimate().memory.layersOnRank;
        };
        // The default layout: tp 8 with sequence parallelism.
        QCOMPARE(named("all-gather (SP)"), 4);
        QCOMPARE(named("reduce-scatter (SP)"), 4);
        QVERIFY(qAbs(sum(0) * perStep() - figure(f.page.communication(), "TP", 3)) <
                1e-9 * sum(0) * perStep());
        QCOMPARE(sum(1), 0.0); // cp 1: no ring passes
        setBool(f.form(), "sp", false);
        QCOMPARE(named("(SP)"), 0);
        QCOMPARE(named("all-reduce (TP)"), 4);
        setInt(f.form(), "cp", 2);
        QCOMPARE(named("ring pass"), 3);
        QVERIFY(sum(1) > 0);
        QVERIFY(qAbs(sum(1) * perStep() - figure(f.page.communication(), "CP", 3)) <
                1e-9 * sum(1) * perStep());
        // The table lists the same ops, with what each collective is for.
        QCOMPARE(f.page.layerOps()->rowCount(), chart->categoryCount());
        // Under full recompute the forward runs again, named as such.
        choose(f.form(), "recompute", "full");
        QVERIFY(named("recompute: all-reduce (TP)") == 2);
    }

    void hiddenPageCatchesUpWhenShown() {
        SessionDocument doc;
        ExplorerPage page(&doc);
        const double step = figure(page.figures(), "Step time");
        doc.edit("batch", [](Session& s) { s.parallel.globalBatch = 1024; });
        QCOMPARE(figure(page.figures(), "Step time"), step); // not redrawn while hidden
        page.show();
        QVERIFY(figure(page.figures(), "Step time") > 1.8 * step);
    }

    void searchCancelsAndKeepsPreviousResults() {
        Fixture f;
        choose(f.form(), "model", "preset:llama3-405b");
        setInt(f.form(), "nodes", 2048); // 16,384 GPUs: a long search
        QSignalSpy done(&f.page, &ExplorerPage::searchFinished);
        f.page.startSearch();
        f.page.cancelSearch();
        QVERIFY(done.wait(60000));
        QCOMPARE(done.first().first().toBool(), true);
        QVERIFY(!f.page.searchResult());
        QVERIFY(!f.page.searchRunning());
    }
};

QTEST_MAIN(TestExplorerPage)
#include "test_explorer_page.moc"
