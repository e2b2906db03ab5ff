#include "plan_controls.h"

#include "core/presets.h"
#include "core/units.h"
#include "plan/formulas.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSpinBox>
#include <algorithm>

namespace shardscope {

namespace {

QString q(const std::string& s) {
    return QString::fromStdString(s);
}

// Architecture edits turn any model into a custom one (a bare count has no architecture, so it
// starts again from the Llama 3 8B shape).
void makeCustom(Session& s) {
    if (s.model.isBare()) {
        const int seq = s.model.seqLen;
        s.model = findModelPreset("llama3-8b");
        if (seq > 0)
            s.model.seqLen = seq;
    }
    if (s.modelSource != ModelSource::Custom) {
        s.modelSource = ModelSource::Custom;
        s.modelOrigin.clear();
        s.model.id.clear();
        s.model.name = "Custom (from " + s.model.name + ")";
        s.model.publishedParams = 0;
        s.model.source = "edited in Shardscope";
    }
}

QString modelKey(const Session& s) {
    switch (s.modelSource) {
    case ModelSource::Preset:
        return "preset:" + q(s.modelOrigin);
    case ModelSource::Custom:
        return "custom";
    case ModelSource::Bare:
        return "bare";
    case ModelSource::HuggingFace:
        return "imported";
    }
    return {};
}

void afterLayoutEdit(Session& s, LayoutFollows follows) {
    if (follows == LayoutFollows::Cluster)
        fitDataParallelToCluster(s);
    else
        fitClusterToLayout(s);
}

} // namespace

QComboBox* addModelControls(SessionForm& form) {
    form.addSection("Model");
    std::vector<std::pair<QString, QString>> items;
    for (const ModelSpec& m : modelPresets())
        items.push_back({q(m.name), "preset:" + q(m.id)});
    items.push_back({"Custom architecture", "custom"});
    items.push_back({"Parameter count only", "bare"});
    items.push_back({"Imported config.json", "imported"});
    items.push_back({"Open Hugging Face config.json...", "hf"});
    QComboBox* picker = form.addChoice(
        "model", "Model",
        "A preset, your own architecture, a bare parameter count (model state only), or a "
        "Hugging Face config.json (also by dropping it on the window)",
        items, modelKey, [](Session& s, const QString& key) {
            if (key.startsWith("preset:")) {
                s.modelSource = ModelSource::Preset;
                s.modelOrigin = key.mid(7).toStdString();
                s.model = findModelPreset(s.modelOrigin);
            } else if (key == "custom") {
                makeCustom(s);
            } else if (key == "bare" && !s.model.isBare()) {
                const double n = double(countParameters(s.model).total);
                const int seq = s.model.seqLen;
                s.model = ModelSpec{};
                s.model.name = formatCount(n) + " parameters";
                s.model.bareParams = n;
                s.model.seqLen = seq;
                s.modelSource = ModelSource::Bare;
                s.modelOrigin.clear();
            }
            // "imported" and "hf" change nothing here: the window imports files.
        });
    // The imported model goes by its own name ("Imported: meta-llama/Meta-Llama-3-8B").
    form.onRefresh([picker](const Session& s) {
        const int i = picker->findData("imported");
        picker->setItemText(i, s.modelSource == ModelSource::HuggingFace
                                   ? "Imported: " + q(s.model.name)
                                   : QString("Imported config.json"));
    });

    // Architecture fields: editing one makes the model custom; a bare count has none.
    const auto architecture = [&](QWidget* control) {
        form.setEnabledWhen(control, [](const Session& s) { return !s.model.isBare(); });
    };
    const auto archInt = [&](const char* name, const QString& label, const QString& tip, int max,
                             auto ModelSpec::*field) {
        architecture(form.addInt(
            name, label, tip, 1, max, [field](const Session& s) { return int(s.model.*field); },
            [field](Session& s, int v) {
                makeCustom(s);
                s.model.*field = v;
                // Fewer layers keep an MoE model's dense first ones fewer than all of them.
                s.model.moe.firstDenseLayers =
                    std::clamp(s.model.moe.firstDenseLayers, 0, std::max(0, s.model.layers - 1));
                // Latent attention has keys and values for every head.
                if (s.model.mla.enabled())
                    s.model.kvHeads = s.model.heads;
            }));
    };
    archInt("layers", "Layers", "Transformer layers (L)", 1024, &ModelSpec::layers);
    archInt("hidden", "Hidden size", "Model width h", 1 << 17, &ModelSpec::hidden);
    archInt("heads", "Attention heads", "Query heads a", 1024, &ModelSpec::heads);
    archInt("kv-heads", "KV heads", "Key/value heads (fewer than heads: grouped-query attention)",
            1024, &ModelSpec::kvHeads);
    // Latent attention (an imported DeepSeek model) has keys and values for every head.
    form.setEnabledWhen(form.control("kv-heads"), [](const Session& s) {
        return !s.model.isBare() && !s.model.mla.enabled();
    });
    archInt("ffn", "FFN hidden", "Width of the MLP's inner layer", 1 << 20, &ModelSpec::ffnHidden);
    // Mixture of experts, kept valid as a session file requires: no routed experts is a dense
    // model (no top-k, no shared experts); otherwise 1 <= top-k <= experts.
    const auto moeInt = [&](const char* name, const QString& label, const QString& tip, int min,
                            int max, auto setter, auto getter) {
        QSpinBox* box =
            form.addInt(name, label, tip, min, max, getter, [setter](Session& s, int v) {
                makeCustom(s);
                setter(s.model.moe, v);
                if (!s.model.moe.enabled()) { // a dense model has no experts to split
                    s.parallel.ep = 1;
                    s.parallel.etp = 0;
                    s.parallel.epCommOverlap = false;
                }
            });
        form.setEnabledWhen(box, [routed = std::string(name) == "experts"](const Session& s) {
            return !s.model.isBare() && (routed || s.model.moe.enabled());
        });
    };
    moeInt(
        "experts", "Routed experts",
        "Experts in each MoE layer's MLP (0: a dense model); expert parallelism (ep) splits them",
        0, 1 << 14,
        [](MoeSpec& moe, int v) {
            moe.experts = v;
            moe.topK = v > 0 ? std::clamp(moe.topK, 1, v) : 0;
            if (v == 0)
                moe.sharedExperts = moe.firstDenseLayers = 0;
        },
        [](const Session& s) { return s.model.moe.experts; });
    moeInt(
        "top-k", "Experts per token", "Routed experts each token is sent to (top-k)", 1, 1 << 14,
        [](MoeSpec& moe, int v) { moe.topK = std::min(v, std::max(1, moe.experts)); },
        [](const Session& s) { return std::max(1, s.model.moe.topK); });
    moeInt(
        "shared-experts", "Shared experts",
        "Experts every token passes through, beside its routed ones (DeepSeek, Qwen-MoE)", 0, 64,
        [](MoeSpec& moe, int v) { moe.sharedExperts = v; },
        [](const Session& s) { return s.model.moe.sharedExperts; });
    moeInt(
        "expert-ffn", "Expert FFN", "Width of one expert's MLP (0: the FFN hidden size)", 0,
        1 << 20, [](MoeSpec& moe, int v) { moe.expertFfn = v; },
        [](const Session& s) { return int(s.model.moe.expertFfn); });
    QSpinBox* firstDense = form.addInt(
        "first-dense-layers", "Dense first layers",
        "Layers before the MoE ones whose MLP is dense, of the FFN hidden width (DeepSeek's "
        "first_k_dense_replace); they sit on the first pipeline stages",
        0, 1 << 14, [](const Session& s) { return s.model.moe.firstDenseLayers; },
        [](Session& s, int v) {
            makeCustom(s);
            s.model.moe.firstDenseLayers = std::clamp(v, 0, std::max(0, s.model.layers - 1));
        });
    form.setEnabledWhen(
        firstDense, [](const Session& s) { return !s.model.isBare() && s.model.moe.enabled(); });
    archInt("vocab", "Vocabulary", "Tokens in the vocabulary (embedding and LM head rows)", 1 << 22,
            &ModelSpec::vocab);
    architecture(form.addInt(
        "mtp-modules", "MTP modules",
        "Multi-token prediction modules (DeepSeek-V3): each trains one more layer, a 2h x h "
        "projection and the output head again, on the last pipeline stage",
        0, 64, [](const Session& s) { return s.model.mtpModules; },
        [](Session& s, int v) {
            makeCustom(s);
            s.model.mtpModules = v;
        }));
    architecture(form.addChoice(
        "activation", "MLP", "GELU (2 matrices) or a gated MLP (SwiGLU/GeGLU, 3 matrices)",
        {{"GELU", "gelu"}, {"SwiGLU", "swiglu"}, {"GeGLU", "geglu"}},
        [](const Session& s) { return q(toString(s.model.activation)); },
        [](Session& s, const QString& k) {
            makeCustom(s);
            s.model.activation = activationFromString(k.toStdString());
        }));
    auto* params = form.addDouble(
        "params", "Parameters", "The bare parameter count, in billions (model state only)", 0.001,
        1e5, 3, " B",
        [](const Session& s) {
            return s.model.bareParams.value_or(double(countParameters(s.model).total)) / 1e9;
        },
        [](Session& s, double v) {
            s.model.bareParams = v * 1e9;
            s.model.name = formatCount(v * 1e9) + " parameters";
        });
    form.setEnabledWhen(params, [](const Session& s) { return s.model.isBare(); });
    form.addInt(
        "seq", "Sequence length", "Tokens per training sequence (s)", 1, 1 << 20,
        [](const Session& s) { return s.model.seqLen; },
        [](Session& s, int v) { s.model.seqLen = v; });
    return picker;
}

void addGpuControl(SessionForm& form) {
    std::vector<std::pair<QString, QString>> items;
    for (const GpuSpec& g : gpuPresets())
        items.push_back({q(g.name), q(g.id)});
    form.addChoice(
        "gpu", "GPU", "The GPU type: memory, peak FLOP/s, HBM and NVLink bandwidth (datasheets)",
        items, [](const Session& s) { return q(s.cluster.gpu.id); },
        [](Session& s, const QString& id) {
            s.cluster = withGpu(s.cluster, findGpuPreset(id.toStdString()));
        });
    QDoubleSpinBox* headroom = form.addDouble(
        "memory-headroom", "Memory headroom",
        "Keep this share of each GPU's memory free, for what the planner does not count (a "
        "framework's own buffers, allocator spikes, a longer sequence later): a layout fits only "
        "within the rest, and the search ranks only those",
        0, 90, 1, " %", [](const Session& s) { return s.memoryHeadroom * 100; },
        [](Session& s, double v) { s.memoryHeadroom = v / 100; });
    headroom->setSpecialValueText("none");
}

void addPrecisionControls(SessionForm& form) {
    form.addSection("Precision and optimizer");
    form.addChoice(
        "precision", "Precision",
        "Which dtypes hold weights, gradients and optimizer state (bytes per parameter with "
        "AdamW), and which peak FLOP/s applies",
        [] {
            std::vector<std::pair<QString, QString>> items;
            // The bytes per parameter come from the planner (weights + grads + master + AdamW).
            for (const NamedPrecisionPolicy& p : namedPrecisionPolicies())
                items.push_back(
                    {QString("%1 (%2 B/param)")
                         .arg(p.label)
                         .arg(modelStateBytesPerParam(p.policy, Optimizer::AdamW, 0, 1)),
                     p.key});
            return items;
        }(),
        [](const Session& s) {
            for (const NamedPrecisionPolicy& p : namedPrecisionPolicies()) {
                if (p.policy == s.parallel.precision)
                    return QString(p.key);
            }
            return QString();
        },
        [](Session& s, const QString& key) {
            for (const NamedPrecisionPolicy& p : namedPrecisionPolicies()) {
                if (key == p.key)
                    s.parallel.precision = p.policy;
            }
        });
    form.addChoice(
        "optimizer", "Optimizer", "AdamW keeps two fp32 moments (8 B/param); SGD one",
        {{"AdamW", "adamw"}, {"SGD with momentum", "sgd"}},
        [](const Session& s) { return q(toString(s.parallel.optimizer)); },
        [](Session& s, const QString& k) {
            s.parallel.optimizer = optimizerFromString(k.toStdString());
        });
    form.addBool(
        "offload", "Offload optimizer",
        "ZeRO-Offload: optimizer state (and sharded fp32 gradients) live in CPU memory",
        [](const Session& s) { return s.parallel.offloadOptimizer; },
        [](Session& s, bool on) { s.parallel.offloadOptimizer = on; });
}

void addLayoutControls(SessionForm& form, LayoutFollows follows, bool withSchedule) {
    form.addSection("Layout");
    form.addChoice(
        "zero", "ZeRO stage",
        "0: replicate everything; 1: shard optimizer state; 2: + gradients; 3 (FSDP): + weights",
        {{"0 (DDP)", "0"}, {"1 (optimizer)", "1"}, {"2 (+ gradients)", "2"}, {"3 / FSDP", "3"}},
        [](const Session& s) { return QString::number(s.parallel.zero); },
        [](Session& s, const QString& k) { s.parallel.zero = k.toInt(); });
    form.addInt(
        "shard-group", "ZeRO shard group",
        "Hybrid sharding (HSDP: FSDP's hybrid_shard, DeepSpeed's MiCS): ZeRO's states are split "
        "over groups of this many of the dp x cp GPUs, each group a whole copy; gradients are "
        "all-reduced across the groups. 0: one group of all of them (full sharding)",
        0, 1 << 16, [](const Session& s) { return s.parallel.shardGroup; },
        [](Session& s, int v) { s.parallel.shardGroup = v; });
    auto degree = [&](const char* name, const QString& label, const QString& tip,
                      int ParallelConfig::*field, LayoutFollows how, bool slider = false) {
        form.addInt(
            name, label, tip, 1, 1 << 16, [field](const Session& s) { return s.parallel.*field; },
            [field, how](Session& s, int v) {
                s.parallel.*field = v;
                afterLayoutEdit(s, how);
            },
            slider);
    };
    // dp always resizes the cluster: "dp 2 -> 4" means twice the GPUs.
    degree("dp", "Data parallel (dp)", "Model replicas; gradients are reduced across them",
           &ParallelConfig::dp, LayoutFollows::Layout, true);
    degree("tp", "Tensor parallel (tp)", "Each layer's matrices split over tp GPUs (Megatron)",
           &ParallelConfig::tp, follows);
    degree("pp", "Pipeline parallel (pp)", "Layers split into pp stages", &ParallelConfig::pp,
           follows);
    degree("cp", "Context parallel (cp)", "The sequence split over cp GPUs (ring attention)",
           &ParallelConfig::cp, follows);
    // ep and etp add no GPUs: the experts are laid out on the stage's tp x dp x cp GPUs.
    QSpinBox* ep = form.addInt(
        "ep", "Expert parallel (ep)",
        "Each MoE layer's routed experts split over ep GPUs (ep must divide the experts, and "
        "etp x ep the tp x dp x cp GPUs); tokens reach their experts and come back by all-to-all",
        1, 1 << 16, [](const Session& s) { return s.parallel.ep; },
        [](Session& s, int v) { s.parallel.ep = v; });
    form.setEnabledWhen(ep, [](const Session& s) { return s.model.moe.enabled(); });
    QSpinBox* etp = form.addInt(
        "etp", "Expert tensor parallel (etp)",
        "Each routed expert's matrices split over etp GPUs, apart from the attention's tp "
        "(Megatron-Core's MoE parallel folding: etp 1 with tp 2 spreads the experts over the "
        "TP group instead). 0: follows tp",
        0, 1 << 16, [](const Session& s) { return s.parallel.etp; },
        [](Session& s, int v) { s.parallel.etp = v; });
    etp->setSpecialValueText(QStringLiteral("same as tp"));
    form.setEnabledWhen(etp, [](const Session& s) { return s.model.moe.enabled(); });
    QDoubleSpinBox* capacity = form.addDouble(
        "capacity-factor", "Expert capacity factor",
        "Token dropping with padding (Megatron's --moe-expert-capacity-factor): each expert "
        "takes this many times its balanced share of the tokens, its GEMMs and all-to-alls "
        "padded to it. 0: dropless",
        0, 1024, 2, "", [](const Session& s) { return s.parallel.expertCapacityFactor; },
        [](Session& s, double v) { s.parallel.expertCapacityFactor = v; });
    form.setEnabledWhen(capacity, [](const Session& s) { return s.model.moe.enabled(); });
    form.addBool(
        "sp", "Sequence parallel", "Shard the norm and dropout activations across the TP group",
        [](const Session& s) { return s.parallel.sequenceParallel; },
        [](Session& s, bool on) { s.parallel.sequenceParallel = on; });
    if (withSchedule) {
        QComboBox* schedule = form.addChoice(
            "schedule", "Pipeline schedule", "How microbatches flow through the stages",
            {{"Naive", "naive"},
             {"GPipe", "gpipe"},
             {"1F1B", "1f1b"},
             {"Interleaved 1F1B", "interleaved"},
             {"Zero bubble ZB-H1", "zero-bubble"},
             {"Zero bubble ZB-1p (1F1B's memory)", "zb-1p"},
             {"Zero bubble ZB-2p (twice 1F1B's memory)", "zb-2p"}},
            [](const Session& s) { return q(toString(s.parallel.schedule)); },
            [](Session& s, const QString& k) {
                s.parallel.schedule = scheduleFromString(k.toStdString());
                if (s.parallel.schedule != PipelineSchedule::Interleaved)
                    s.parallel.vpp = 1;
                else if (s.parallel.vpp < 2)
                    s.parallel.vpp = 2;
            });
        form.setEnabledWhen(schedule, [](const Session& s) { return s.parallel.pp > 1; });
        QSpinBox* vpp = form.addInt(
            "vpp", "Virtual stages", "Model chunks per pipeline rank (interleaved schedule)", 1, 64,
            [](const Session& s) { return s.parallel.vpp; },
            [](Session& s, int v) { s.parallel.vpp = v; });
        form.setEnabledWhen(vpp, [](const Session& s) {
            return s.parallel.schedule == PipelineSchedule::Interleaved;
        });
        QWidget* embedding = form.addBool(
            "embedding-in-pipeline-split", "Embedding takes a layer",
            "The first stage holds one layer fewer for the embedding (Megatron's "
            "--account-for-embedding-in-pipeline-split)",
            [](const Session& s) { return s.parallel.embeddingInPipelineSplit; },
            [](Session& s, bool on) { s.parallel.embeddingInPipelineSplit = on; });
        form.setEnabledWhen(embedding, [](const Session& s) { return s.parallel.pp > 1; });
        QWidget* loss = form.addBool(
            "loss-in-pipeline-split", "Loss takes a layer",
            "The last stage holds one layer fewer for the output head and loss (Megatron's "
            "--account-for-loss-in-pipeline-split)",
            [](const Session& s) { return s.parallel.lossInPipelineSplit; },
            [](Session& s, bool on) { s.parallel.lossInPipelineSplit = on; });
        form.setEnabledWhen(loss, [](const Session& s) { return s.parallel.pp > 1; });
    }
    form.addChoice(
        "recompute", "Recompute",
        "Activation checkpointing: none; selective (Megatron's: attention's core reruns); "
        "selective by op (torchtitan's: every second projection and the norms and activations "
        "rerun, dense models only); full (each layer keeps its input and reruns its forward)",
        {{"None", "none"},
         {"Selective", "selective"},
         {"Selective by op", "selective-op"},
         {"Full", "full"}},
        [](const Session& s) { return q(toString(s.parallel.recompute)); },
        [](Session& s, const QString& k) {
            s.parallel.recompute = recomputeFromString(k.toStdString());
            if (s.parallel.recompute != Recompute::Full)
                s.parallel.recomputeLayers = 0; // it counts fully recomputed layers only
        });
    QSpinBox* recomputed = form.addInt(
        "recompute-layers", "Recomputed layers",
        "Full recompute of only the first this many layers of each virtual pipeline stage "
        "(Megatron-LM's --recompute-method block --recompute-num-layers; torchtitan's layer "
        "checkpointing of every k-th block is layers / k); the others keep their activations",
        0, 100000, [](const Session& s) { return s.parallel.recomputeLayers; },
        [](Session& s, int v) { s.parallel.recomputeLayers = v; });
    recomputed->setSpecialValueText(QStringLiteral("every layer"));
    form.setEnabledWhen(recomputed,
                        [](const Session& s) { return s.parallel.recompute == Recompute::Full; });
    form.addInt(
        "micro-batch", "Micro batch", "Sequences per microbatch on each data-parallel rank", 1,
        4096, [](const Session& s) { return s.parallel.microBatch; },
        [](Session& s, int v) { s.parallel.microBatch = v; });
    form.addBool(
        "flash", "FlashAttention",
        "Fused attention: no s x s scores stored, no memory-bound softmax passes",
        [](const Session& s) { return s.parallel.flashAttention; },
        [](Session& s, bool on) { s.parallel.flashAttention = on; });
    QComboBox* kernel = form.addChoice(
        "attention-kernel", "Attention kernel",
        "Which fused attention kernel runs attention's core, at its published speed on this GPU "
        "(FlashAttention-3 paper, H100). Auto: cuDNN on Hopper, as Transformer Engine picks for "
        "Megatron-Core and NeMo, FlashAttention-2 before it; FlashAttention-3 runs on Hopper only; "
        "FlashAttention-1 (flash-attn 1.x, 2023's Triton kernels) at half FlashAttention-2's "
        "speed, as the FlashAttention-2 paper measured",
        {{"Auto", "auto"},
         {"FlashAttention-1", "flash1"},
         {"FlashAttention-2", "flash2"},
         {"FlashAttention-3", "flash3"},
         {"cuDNN fused", "cudnn"}},
        [](const Session& s) { return q(toString(s.parallel.attentionKernel)); },
        [](Session& s, const QString& k) {
            s.parallel.attentionKernel = attentionKernelFromString(k.toStdString());
        });
    form.setEnabledWhen(kernel, [](const Session& s) { return s.parallel.flashAttention; });
}

void addKernelControls(SessionForm& form) {
    form.addSection("Kernels");
    form.addBool(
        "fused-elementwise", "Fused elementwise kernels",
        "Norms, residual adds, rotary embeddings and the activation run as fused kernels, as "
        "torch.compile and Megatron-LM's and Transformer Engine's fused kernels run them. Off: "
        "PyTorch eager, one kernel an op with fp32 copies in the norms and rotary (torchtitan "
        "without --training.compile): about three times the memory traffic of a Llama layer",
        [](const Session& s) { return s.parallel.fusedElementwise; },
        [](Session& s, bool on) { s.parallel.fusedElementwise = on; });
    QDoubleSpinBox* host = form.addDouble(
        "moe-host-time", "MoE layer host time",
        "Host time of one token-dropless MoE layer for one microbatch, forward and backward: "
        "dropless routing syncs the host once a layer, so a microbatch takes at least its MoE "
        "layers times this (the host roof). 9.4 ms is Megatron-Core's with DeepEP on H100 "
        "(Megatron-MoE-ModelZoo, docs/validation.md); HybridEP or CUDA-graphed routers need "
        "less. 0: no host roof",
        0, 1000, 2, " ms", [](const Session& s) { return s.moeLayerHostSeconds * 1e3; },
        [](Session& s, double v) { s.moeLayerHostSeconds = v / 1e3; });
    form.setEnabledWhen(host, [](const Session& s) {
        return s.model.moe.enabled() && s.parallel.expertCapacityFactor <= 0;
    });
}

void addOverlapControls(SessionForm& form) {
    form.addSection("Communication overlap");
    form.addBool(
        "overlap-grad-reduce", "Overlap gradient reduce",
        "Reduce gradients bucket by bucket during the last backward (PyTorch DDP and FSDP, "
        "Megatron's --overlap-grad-reduce). Off: after it, as Megatron-LM before 2023 and "
        "DeepSpeed's pipeline engine did",
        [](const Session& s) { return s.parallel.overlapGradReduce; },
        [](Session& s, bool on) { s.parallel.overlapGradReduce = on; });
    QWidget* gather = form.addBool(
        "overlap-param-gather", "Overlap parameter gather",
        "ZeRO's parameter all-gathers ahead of use: behind the next forward under ZeRO-1/2 "
        "(Megatron's --overlap-param-gather), prefetched a layer ahead under ZeRO-3 (FSDP)",
        [](const Session& s) { return s.parallel.overlapParamGather; },
        [](Session& s, bool on) { s.parallel.overlapParamGather = on; });
    form.setEnabledWhen(gather, [](const Session& s) { return s.parallel.zero >= 1; });
    QComboBox* prefetch = form.addChoice(
        "backward-prefetch", "Backward prefetch",
        "When ZeRO-3 (FSDP) gathers the next layer's weights in the backward. Before the current "
        "layer's gradients: hidden behind them (FSDP's BACKWARD_PRE, FSDP2, DeepSpeed). After "
        "them: each gather waits in the open, the reduce-scatters still hide (BACKWARD_POST, "
        "Composer's default). None: gathers and reduce-scatters both wait",
        {{"Before the gradients (pre)", "pre"},
         {"After the gradients (post)", "post"},
         {"None", "none"}},
        [](const Session& s) { return q(toString(s.parallel.backwardPrefetch)); },
        [](Session& s, const QString& v) {
            s.parallel.backwardPrefetch = backwardPrefetchFromString(v.toStdString());
        });
    form.setEnabledWhen(prefetch, [](const Session& s) {
        return s.parallel.zero >= 3 && s.parallel.overlapParamGather;
    });
    QWidget* tp = form.addBool(
        "tp-comm-overlap", "Overlap TP communication",
        "Split each TP GEMM against chunks of its all-gather or reduce-scatter (Megatron's "
        "--tp-comm-overlap, Transformer Engine userbuffers); needs sequence parallelism",
        [](const Session& s) { return s.parallel.tpCommOverlap; },
        [](Session& s, bool on) { s.parallel.tpCommOverlap = on; });
    form.setEnabledWhen(tp, [](const Session& s) { return s.parallel.tp > 1; });
    QWidget* ep = form.addBool(
        "ep-comm-overlap", "Overlap EP all-to-alls",
        "Run one microbatch's expert all-to-alls while another computes (Megatron-Core's "
        "--overlap-moe-expert-parallel-comm, the combined 1F1B schedule); needs ep > 1, no full "
        "recompute, and virtual stages with pp > 1",
        [](const Session& s) { return s.parallel.epCommOverlap; },
        [](Session& s, bool on) { s.parallel.epCommOverlap = on; });
    form.setEnabledWhen(ep, [](const Session& s) { return s.model.moe.enabled(); });
}

void addClusterControls(SessionForm& form) {
    form.addSection("Cluster");
    form.addInt(
        "gpus-per-node", "GPUs per node", "GPUs joined by NVLink inside one node", 1, 256,
        [](const Session& s) { return s.cluster.gpusPerNode; },
        [](Session& s, int v) {
            s.cluster.gpusPerNode = v;
            fitDataParallelToCluster(s);
        });
    form.addInt(
        "nodes", "Nodes", "Nodes joined by the network", 1, 1 << 15,
        [](const Session& s) { return s.cluster.nodes; },
        [](Session& s, int v) {
            s.cluster.nodes = v;
            fitDataParallelToCluster(s);
        },
        true);
    form.addDouble(
        "intra-bw", "NVLink per GPU", "Bandwidth per GPU per direction inside a node", 1, 1e5, 0,
        " GB/s", [](const Session& s) { return s.cluster.intraBandwidth / 1e9; },
        [](Session& s, double v) { s.cluster.intraBandwidth = v * 1e9; });
    form.addDouble(
        "inter-bw", "Network per GPU", "Bandwidth per GPU per direction across nodes (its NIC)",
        0.1, 1e5, 1, " GB/s", [](const Session& s) { return s.cluster.interBandwidth / 1e9; },
        [](Session& s, double v) { s.cluster.interBandwidth = v * 1e9; });
    form.addDouble(
        "mtbf", "GPU MTBF", "Mean time between failures of one GPU (Llama 3: about 45,600 h)", 1,
        1e9, 0, " h", [](const Session& s) { return s.cluster.gpuMtbfHours; },
        [](Session& s, double v) { s.cluster.gpuMtbfHours = v; });
    form.addDouble(
        "price", "Price per GPU-hour", "What one GPU-hour costs", 0, 1e4, 2, "",
        [](const Session& s) { return s.cluster.gpuHourCost; },
        [](Session& s, double v) { s.cluster.gpuHourCost = v; });
}

void addTrainingControls(SessionForm& form, bool withTokens) {
    form.addSection("Training run");
    form.addInt(
        "global-batch", "Global batch", "Sequences per optimizer step across the whole job", 1,
        1 << 22, [](const Session& s) { return s.parallel.globalBatch; },
        [](Session& s, int v) { s.parallel.globalBatch = v; }, true);
    if (!withTokens)
        return;
    form.addDouble(
        "tokens", "Tokens to train", "D in 6ND: the tokens the run trains on, in billions", 0, 1e7,
        0, " B tokens", [](const Session& s) { return s.train.trainTokens / 1e9; },
        [](Session& s, double v) { s.train.trainTokens = v * 1e9; });
    QDoubleSpinBox* mfu = form.addDouble(
        "assume-mfu", "Assume MFU",
        "What if the run reached this MFU? Step time, time, GPU-hours and cost to train then "
        "come from model FLOPs / (GPUs x peak x MFU), as back-of-the-envelope estimates make "
        "them; \"modelled\" keeps the step model's own",
        0, 100, 1, " %", [](const Session& s) { return s.assumedMfu * 100; },
        [](Session& s, double v) { s.assumedMfu = v / 100; });
    mfu->setSpecialValueText("modelled");
    form.addChoice(
        "flops-convention", "FLOP count",
        "How MFU and model FLOP/s count a token's FLOPs (papers differ): the planner's 6 x matmul "
        "parameters + the causal half of attention; PaLM's 6N + 12 L H Q T (the whole square; "
        "Chowdhery et al. 2022); Megatron's 96 B s l h^2 (1 + s/6h + V/16lh) with recompute "
        "(Narayanan et al. 2021); or 6N. The modelled step time does not change; an assumed MFU is "
        "read "
        "in this count.",
        {{"6N + causal attention", "causal"},
         {"PaLM: 6N + full attention", "palm"},
         {"Megatron-LM paper", "megatron"},
         {"6N", "6n"}},
        [](const Session& s) { return q(toString(s.flopsConvention)); },
        [](Session& s, const QString& k) {
            s.flopsConvention = flopsConventionFromString(k.toStdString());
        });
    form.addBool(
        "post-validation", "Optimizer post-validation",
        "The framework checks the gradient norm and NaNs after the optimizer step and rolls back "
        "when needed (Qi et al. 2024, zbpp), instead of synchronising every pipeline rank before "
        "it: the ranks' staggered starts then overlap, and ZB-1p and ZB-2p count each rank's span "
        "(ZB-2p: no bubble once m >= 2p). Megatron-LM and Shardscope's engine synchronise.",
        [](const Session& s) { return s.optimizerPostValidation; },
        [](Session& s, bool on) { s.optimizerPostValidation = on; });
}

} // namespace shardscope
