// Pipeline: a schedule's timeline on p ranks (and a second schedule beneath it to compare),
// animated with a playhead, with the simulated bubble beside the closed form and each rank's
// peak activations. The op lists are the ones the engine runs (engine/sched). It opens on the
// session's layout (p, m, v and schedule from the Explorer) and says so; setting one of them
// here is an experiment, and one click goes back to the layout.
#pragma once

#include "animation_clock.h"
#include "page.h"
#include "sched/pipeline_simulator.h"

#include <optional>

class QComboBox;
class QLabel;
class QPushButton;
class QSlider;
class QStandardItemModel;

namespace shardscope {

class CalculatorPanel;
class PipelineView;
class SeriesChart;
class SessionForm;

class PipelinePage : public Page {
    Q_OBJECT
public:
    PipelinePage(SessionDocument* doc, QWidget* parent = nullptr);

    QString id() const override { return "pipeline"; }
    QString title() const override { return "Pipeline"; }
    std::vector<Chart*> charts() const override;
    std::vector<std::pair<QString, QAbstractItemModel*>> tables() const override;
    QString reportHtml() const override;
    QString chartCaption(const QString& session) const override;
    bool showView(const QString& view) override; // "at-P": the playhead at P % of the run
    QString viewsHelp() const override { return "at-P, P from 0 to 100 (% of the animation)"; }

    // Animation: `seconds` of wall time since the start at the current speed; the whole run
    // plays in kPlaySeconds at 1x. Deterministic, so tests set it directly.
    static constexpr double kPlaySeconds = 6.0;
    void setAnimationTime(double seconds) { clock_.setPosition(seconds / kPlaySeconds); }
    void play() { clock_.play(); }
    void pause() { clock_.pause(); }
    bool playing() const { return clock_.playing(); }
    void setSpeed(double speed) { clock_.setSpeed(speed); }

    // Write the first schedule's timeline as Chrome trace JSON; empty string or the error.
    QString exportTrace(const QString& path) const;

    CalculatorPanel* panel() const { return panel_; }
    SessionForm* form() const { return form_; }
    PipelineView* viewA() const { return viewA_; }
    PipelineView* viewB() const { return viewB_; }
    SeriesChart* memoryChart() const { return memory_; }
    QStandardItemModel* figures() const { return figures_; }
    QLabel* layoutNote() const { return layoutNote_; }
    QPushButton* backToLayoutButton() const { return backToLayout_; }
    const std::optional<PipelineTimeline>& timelineA() const { return timelineA_; }
    const std::optional<PipelineTimeline>& timelineB() const { return timelineB_; }

protected:
    void refresh() override;

private:
    void showPosition(double position);
    double longestMakespan() const;

    SessionDocument* doc_;
    CalculatorPanel* panel_;
    SessionForm* form_;
    PipelineView* viewA_;
    PipelineView* viewB_;
    SeriesChart* memory_;
    QStandardItemModel* figures_;
    QStandardItemModel* opsA_;
    QSlider* scrub_;
    QLabel* layoutNote_;        // whose layout is shown: the session's, or an experiment
    QPushButton* backToLayout_; // shown while experimenting
    AnimationClock clock_{kPlaySeconds};
    std::optional<PipelineTimeline> timelineA_, timelineB_;
};

} // namespace shardscope
