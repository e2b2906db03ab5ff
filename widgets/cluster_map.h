// Every GPU of a cluster drawn inside its node, coloured by tensor-parallel group, pipeline
// stage, data-parallel replica or context-parallel rank. It makes "TP inside a node, PP across
// nodes, DP on top" visible at a glance and warns when a TP group crosses nodes.
#pragma once

#include "chart.h"
#include "core/cluster_spec.h"
#include "core/parallel_config.h"

#include <QImage>

namespace shardscope {

enum class ColorBy { TpGroup, PpStage, DpReplica, CpRank };
QString toDisplayString(ColorBy c); // "TP group", "PP stage", ...

class ClusterMap : public Chart {
    Q_OBJECT
public:
    explicit ClusterMap(QWidget* parent = nullptr);

    void setLayout(const ClusterSpec& cluster, const ParallelConfig& config);
    void setColorBy(ColorBy c);
    ColorBy colorBy() const { return colorBy_; }

    int gpuCount() const;
    // The GPU (global rank) under a point in widget coordinates, or -1.
    int gpuAt(const QPoint& pos) const;
    // "GPU 13 (node 1, slot 5): dp 0, tp 5, pp 0, cp 0"
    QString describeGpu(int rank) const;
    QColor colorOf(int rank) const;
    // The hatching over the colour: none up to 16 groups, then one per further round of 16.
    Qt::BrushStyle hatchOf(int rank) const;
    bool tpCrossesNodes() const;
    // The warning shown above the map, empty when there is none.
    QString warning() const;

    QSize sizeHint() const override;
    void renderTo(QPainter& painter, const QSize& size) override;

signals:
    void gpuHovered(int rank); // -1 when the pointer leaves the GPUs

protected:
    void paintEvent(QPaintEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    bool event(QEvent* e) override; // tooltips, palette changes

private:
    struct Geometry; // where nodes and GPU cells go for a given size
    Geometry geometryFor(const QSize& size) const;
    void drawBase(QPainter& painter, const QSize& size, const Geometry& g);
    void drawHover(QPainter& painter, const Geometry& g) const;

    ClusterSpec cluster_;
    ParallelConfig config_;
    ColorBy colorBy_ = ColorBy::TpGroup;
    int hovered_ = -1;
    QImage cache_; // the map without hover outlines, as last painted on screen
    bool cacheDirty_ = true;
};

} // namespace shardscope
