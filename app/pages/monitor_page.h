// Monitor: launches the session's model and layout on this machine, on hosts over ssh or through
// Slurm, and shows the run live, rank by rank, beside what the planner predicted: throughput,
// step time, MFU, loss and gradient norm; memory per rank against its prediction; the measured
// pipeline above the schedule simulated with the measured costs; exposed communication per axis;
// stragglers, stalled, silent and dead ranks; predicted against measured. A finished run opens
// from its directory with a time slider to replay it, and a second run can be laid beside it.
#pragma once

#include "page.h"
#include "run/live_run.h"
#include "run/monitor_data.h"
#include "run/run_controller.h"

#include <QTimer>
#include <memory>
#include <optional>

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSlider;
class QStandardItemModel;
class QTabWidget;

namespace shardscope {

class CalculatorPanel;
class LivePlot;
class MemoryChart;
class PipelineView;
class SessionForm;

namespace watch {
class RunReplay;
}

class MonitorPage : public Page {
    Q_OBJECT
public:
    MonitorPage(SessionDocument* doc, QWidget* parent = nullptr);
    ~MonitorPage() override;

    QString id() const override { return "monitor"; }
    QString title() const override { return "Monitor"; }
    std::vector<Chart*> charts() const override;
    std::vector<std::pair<QString, QAbstractItemModel*>> tables() const override;
    QString reportHtml() const override;
    // "training", "memory", "pipeline", "communication", "ranks", "comparison": that tab.
    bool showView(const QString& view) override;
    QString viewsHelp() const override {
        return "training, memory, pipeline, communication, ranks, comparison, each optionally "
               "with -at-P (P from 0 to 100, % into a replayed run), or at-P alone";
    }

    RunController* controller() { return &controller_; }
    LiveRun* live() { return &live_; }

    // Asks for a run directory to open (or to compare with); an error shows in the verdict.
    void chooseRunDirectory(bool compare);
    // A run directory, replayed from its files (its end by default); the error or "".
    QString openRun(const QString& dir);
    // A second run directory, drawn beside the first; the error or "".
    QString compareRun(const QString& dir);
    bool replaying() const { return replay_ != nullptr; }
    // The replay's position, 0 (the first event) to 1 (the last).
    void setReplayPosition(double fraction);

    // Takes the current data now instead of at the next frame (tests, the headless render).
    void refreshNow();
    const MonitorData& data() const { return data_; }

    CalculatorPanel* panel() const { return panel_; }
    SessionForm* form() const { return form_; }
    QTabWidget* tabs() const { return tabs_; }
    LivePlot* throughputPlot() const { return throughput_; }
    MemoryChart* memoryChart() const { return memory_; }
    PipelineView* measuredView() const { return measured_; }
    PipelineView* simulatedView() const { return simulated_; }
    QStandardItemModel* ranksTable() const { return ranks_; }
    QStandardItemModel* comparisonTable() const { return comparison_; }
    QStandardItemModel* communicationTable() const { return communication_; }
    QLabel* statusLabel() const { return status_; }

signals:
    void refreshed(); // the widgets show new data

protected:
    void refresh() override; // the session changed: the launch settings' controls

private:
    void buildForm();
    // A line for a setting of this machine's (QSettings "launch/NAME"), not the session's.
    QLineEdit* machineSetting(const QString& name, const QString& label, const QString& tip,
                              const QString& placeholder);
    Session sessionToLaunch() const; // the session with this machine's settings filled in
    void scheduleFrame();
    void showData();
    void showCharts(); // the charts of the tab in view (all of them during refreshNow)
    void showTraining();
    void showMemory();
    void showPipeline();
    void updateButtons();

    SessionDocument* doc_;
    LiveRun live_;
    RunController controller_;
    std::unique_ptr<watch::RunReplay> replay_;
    std::optional<MonitorData> other_; // the run laid beside, when comparing
    QString otherName_;
    MonitorData data_;
    QTimer frame_; // one redraw per frame however many events came
    bool allCharts_ = false;
    bool chartsStale_ = false; // charts of hidden tabs lag data_ until shown
    QTimer heartbeat_;         // silence grows without events: re-judge health every second

    CalculatorPanel* panel_;
    SessionForm* form_;
    QLabel* status_;
    QPushButton *start_, *stop_, *kill_, *resume_;
    QPlainTextEdit* log_;
    QSlider* replaySlider_;
    QLabel* replayLabel_;
    QTabWidget* tabs_;
    LivePlot *throughput_, *stepTime_, *loss_, *mfu_, *gradNorm_;
    MemoryChart* memory_;
    PipelineView *measured_, *simulated_;
    QLabel* pipelineNote_;
    QStandardItemModel *ranks_, *comparison_, *communication_;
};

} // namespace shardscope
