// Collectives: a collective algorithm played out on N GPUs around a ring, beside the naive
// reduce-to-one-and-broadcast (or the ring, when naive is chosen), each at one step per half
// second so a student can follow it, with a sentence per step on what moves and why, and each
// view's modelled time so far; time, algbw and busbw from the alpha-beta model, with formulas.
#pragma once

#include "animation_clock.h"
#include "page.h"
#include "sched/collective_plan.h"

class QLabel;
class QPushButton;
class QStandardItemModel;

namespace shardscope {

class CalculatorPanel;
class RingView;
class SessionForm;

class CollectivesPage : public Page {
    Q_OBJECT
public:
    CollectivesPage(SessionDocument* doc, QWidget* parent = nullptr);

    QString id() const override { return "collectives"; }
    QString title() const override { return "Collectives"; }
    std::vector<Chart*> charts() const override;
    std::vector<std::pair<QString, QAbstractItemModel*>> tables() const override;
    QString reportHtml() const override;
    bool showView(const QString& view) override; // "step-N": paused after N steps
    QString viewsHelp() const override;
    QString chartCaption(const QString& session) const override;

    // Animation in steps: both algorithms take one step every kSecondsPerStep at 1x, however
    // long their steps take on the modelled links; `fraction` 0..1 runs over the longer one's
    // steps. Deterministic, so tests set it directly.
    static constexpr double kSecondsPerStep = 0.5;
    int stepsShown() const; // the longer algorithm's step count: fraction 1 is its end
    void setFraction(double fraction) { clock_.setPosition(fraction); }
    double fraction() const { return clock_.position(); }
    void stepForward(); // to the next step boundary of the main algorithm
    void stepBack();
    void play() { clock_.play(); }
    void pause() { clock_.pause(); }
    bool playing() const { return clock_.playing(); }
    void setSpeed(double speed) { clock_.setSpeed(speed); }
    const AnimationClock& clock() const { return clock_; }

    CalculatorPanel* panel() const { return panel_; }
    SessionForm* form() const { return form_; }
    RingView* mainView() const { return main_; }
    RingView* compareView() const { return compare_; }
    QStandardItemModel* figures() const { return figures_; }
    const CollectiveTiming& mainTiming() const { return mainTiming_; }
    const CollectiveTiming& compareTiming() const { return compareTiming_; }
    QString stepText() const; // the narration of the main algorithm's current step
    QLabel* narration() const { return narration_; }

protected:
    void refresh() override;

private:
    void showPosition(double fraction);
    QString viewStatus(const RingView* view, const CollectiveTiming& t) const;

    SessionDocument* doc_;
    CalculatorPanel* panel_;
    SessionForm* form_;
    RingView* main_;
    RingView* compare_;
    QStandardItemModel* figures_;
    QStandardItemModel* links_;
    QLabel* narration_;
    AnimationClock clock_{kSecondsPerStep};
    CollectiveTiming mainTiming_, compareTiming_;
    QStringList narrations_; // one per step of the main algorithm, then the finished state
};

} // namespace shardscope
