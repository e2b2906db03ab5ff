// The controls both pages share, declared once: model, GPU, precision, layout, cluster and the
// training run. Each adds rows to a SessionForm.
#pragma once

#include "session_form.h"

class QComboBox;

namespace shardscope {

// How layout edits keep layout and cluster consistent (see fitDataParallelToCluster).
enum class LayoutFollows { Cluster, Layout };

// Model picker (presets, custom architecture, a bare parameter count, "Hugging Face
// config.json..."), the architecture fields and the sequence length. Returns the picker; its
// item with data "hf" asks the window to import a file (the page connects it).
QComboBox* addModelControls(SessionForm& form);
// The GPU preset and the memory headroom kept free on each GPU.
void addGpuControl(SessionForm& form);
void addPrecisionControls(SessionForm& form);
void addLayoutControls(SessionForm& form, LayoutFollows follows, bool withSchedule);
// How the framework runs the memory-bound ops (fused or eager): the step time's alone.
void addKernelControls(SessionForm& form);
// Which communication runs beside compute, as the framework is configured (time only).
void addOverlapControls(SessionForm& form);
void addClusterControls(SessionForm& form);
void addTrainingControls(SessionForm& form, bool withTokens = true);

} // namespace shardscope
