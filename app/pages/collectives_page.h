// Collectives: a collective algorithm played out on N GPUs around a ring, beside the naive
// reduce-to-one-and-broadcast (or the ring, when naive is chosen) on the same clock, so the
// bottleneck is visible; time, algbw and busbw from the alpha-beta model, with the formulas.
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

    // Animation on one clock in modelled seconds: `fraction` 0..1 of the slower algorithm's
    // time, which plays in kPlaySeconds at 1x. Deterministic, so tests set it directly.
    static constexpr double kPlaySeconds = 8.0;
    void setFraction(double fraction) { clock_.setPosition(fraction); }
    double fraction() const { return clock_.position(); }
    void stepForward(); // to the next step boundary of the main algorithm
    void stepBack();
    void play() { clock_.play(); }
    void pause() { clock_.pause(); }
    bool playing() const { return clock_.playing(); }
    void setSpeed(double speed) { clock_.setSpeed(speed); }

    CalculatorPanel* panel() const { return panel_; }
    SessionForm* form() const { return form_; }
    RingView* mainView() const { return main_; }
    RingView* compareView() const { return compare_; }
    QStandardItemModel* figures() const { return figures_; }
    const CollectiveTiming& mainTiming() const { return mainTiming_; }
    const CollectiveTiming& compareTiming() const { return compareTiming_; }
    QString stepText() const;

protected:
    void refresh() override;

private:
    void showPosition(double fraction);
    double stepsAt(const CollectiveTiming& t, double seconds) const;

    SessionDocument* doc_;
    CalculatorPanel* panel_;
    SessionForm* form_;
    RingView* main_;
    RingView* compare_;
    QStandardItemModel* figures_;
    QStandardItemModel* links_;
    QLabel* stepLabel_;
    AnimationClock clock_{kPlaySeconds};
    CollectiveTiming mainTiming_, compareTiming_;
};

} // namespace shardscope
