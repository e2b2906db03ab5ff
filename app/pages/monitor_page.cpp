#include "monitor_page.h"

#include "calculator_panel.h"
#include "controls/session_form.h"
#include "core/units.h"
#include "live_plot.h"
#include "memory_chart.h"
#include "page_support.h"
#include "pipeline_view.h"
#include "session_document.h"
#include "watch/run_files.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSlider>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

namespace shardscope {

namespace {

const std::vector<std::pair<QString, QString>> kTargets = {
    {"This machine", "local"}, {"Hosts over ssh", "ssh"}, {"Slurm", "slurm"}};

// The planner's figure for `key` in the run's prediction, or NaN.
double predicted(const MonitorData& d, const char* key) {
    const nlohmann::json& p = d.info.prediction;
    if (!p.is_object() || !p.contains(key) || !p[key].is_number())
        return NAN;
    return p[key].get<double>();
}

std::vector<LiveLine> linesOf(const MetricSeries& m) {
    std::vector<LiveLine> lines;
    for (const PlotLine& l : m.lines)
        lines.push_back({l.name, l.x, l.y, false});
    return lines;
}

std::optional<LiveBand> bandOf(const MetricSeries& m) {
    if (!m.band)
        return std::nullopt;
    return LiveBand{m.band->x, m.band->lo, m.band->hi};
}

QString errorText(double percent) {
    return std::isfinite(percent)
               ? QString("%1%2 %").arg(percent >= 0 ? "+" : "").arg(percent, 0, 'f', 1)
               : QString("-");
}

QString valueText(double v, watch::Unit unit) {
    return qs(watch::formatValue(v, unit));
}

MemoryBreakdown breakdownOf(const watch::MemoryBytes& m) {
    MemoryBreakdown b;
    b.parameters = m.parameters;
    b.gradients = m.gradients;
    b.optimizer = m.optimizer;
    b.activations = m.activations;
    b.temporary = m.workspace;
    return b;
}

// Intervals for the pipeline view's strips.
std::vector<std::vector<std::pair<double, double>>>
stripsOf(const std::vector<std::vector<watch::Interval>>& rows) {
    std::vector<std::vector<std::pair<double, double>>> out;
    for (const auto& rank : rows) {
        std::vector<std::pair<double, double>> row;
        for (const watch::Interval& i : rank)
            row.emplace_back(i.start, i.end);
        out.push_back(std::move(row));
    }
    return out;
}

QStandardItem* textItem(const QString& text, const QString& tip = {}) {
    return figureItem(text, 0, tip);
}

} // namespace

MonitorPage::MonitorPage(SessionDocument* doc, QWidget* parent)
    : Page(parent), doc_(doc), controller_(&live_), panel_(new CalculatorPanel(this)),
      form_(new SessionForm(doc)), status_(new QLabel), start_(new QPushButton("Start")),
      stop_(new QPushButton("Stop")), kill_(new QPushButton("Kill")),
      resume_(new QPushButton("Resume")), log_(new QPlainTextEdit),
      replaySlider_(new QSlider(Qt::Horizontal)), replayLabel_(new QLabel), tabs_(new QTabWidget),
      throughput_(new LivePlot), stepTime_(new LivePlot), loss_(new LivePlot), mfu_(new LivePlot),
      gradNorm_(new LivePlot), memory_(new MemoryChart), measured_(new PipelineView),
      simulated_(new PipelineView), pipelineNote_(new QLabel), ranks_(new QStandardItemModel(this)),
      comparison_(new QStandardItemModel(this)), communication_(new QStandardItemModel(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(panel_);
    buildForm();

    // Controls: the form, the buttons, what the launch says.
    auto* controls = new QWidget;
    auto* c = new QVBoxLayout(controls);
    c->setContentsMargins(0, 0, 0, 0);
    c->addWidget(form_);
    auto* buttons = new QGridLayout;
    for (auto [button, name] :
         {std::pair{start_, "start"}, {stop_, "stop"}, {kill_, "kill"}, {resume_, "resume"}})
        button->setObjectName(name);
    start_->setToolTip("Check the session's layout with the engine, then start the run");
    stop_->setToolTip("Every rank finishes its step, writes a checkpoint and ends (SIGUSR1)");
    kill_->setToolTip("End the job now (SIGTERM to the launcher; scancel under Slurm)");
    resume_->setToolTip("Start the stopped run again from its newest checkpoint");
    buttons->addWidget(start_, 0, 0);
    buttons->addWidget(stop_, 0, 1);
    buttons->addWidget(kill_, 1, 0);
    buttons->addWidget(resume_, 1, 1);
    auto* open = new QPushButton("Open run directory...");
    auto* compare = new QPushButton("Compare with run...");
    open->setObjectName("open-run");
    compare->setObjectName("compare-run");
    buttons->addWidget(open, 2, 0);
    buttons->addWidget(compare, 2, 1);
    c->addLayout(buttons);
    status_->setObjectName("status");
    status_->setWordWrap(true);
    status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    c->addWidget(status_);
    log_->setObjectName("log");
    log_->setReadOnly(true);
    log_->setMaximumBlockCount(2000);
    log_->setPlaceholderText("What the engine, mpirun, ssh and Slurm print");
    log_->setMinimumHeight(120);
    c->addWidget(log_, 1);
    panel_->setControls(controls);

    connect(start_, &QPushButton::clicked, this, [this] {
        replay_.reset();
        controller_.start(sessionToLaunch());
    });
    connect(stop_, &QPushButton::clicked, &controller_, &RunController::stop);
    connect(kill_, &QPushButton::clicked, &controller_, &RunController::kill);
    connect(resume_, &QPushButton::clicked, this, [this] {
        replay_.reset();
        controller_.resume();
    });
    connect(open, &QPushButton::clicked, this, [this] { chooseRunDirectory(false); });
    connect(compare, &QPushButton::clicked, this, [this] { chooseRunDirectory(true); });

    // The picture: a replay bar over the tabs.
    auto* picture = new QWidget;
    auto* p = new QVBoxLayout(picture);
    p->setContentsMargins(0, 0, 0, 0);
    auto* replayRow = new QHBoxLayout;
    replaySlider_->setObjectName("replay");
    replaySlider_->setRange(0, 1000);
    replaySlider_->setValue(1000);
    replayRow->addWidget(new QLabel("Replay"));
    replayRow->addWidget(replaySlider_, 1);
    replayRow->addWidget(replayLabel_);
    auto* replayBar = new QWidget;
    replayBar->setLayout(replayRow);
    replayBar->setObjectName("replay-bar");
    replayBar->setVisible(false);
    p->addWidget(replayBar);
    connect(replaySlider_, &QSlider::valueChanged, this,
            [this](int v) { setReplayPosition(v / 1000.0); });

    throughput_->setTitle("Throughput");
    throughput_->setAxes("step", "tokens/s", ValueKind::Plain);
    stepTime_->setTitle("Step time");
    stepTime_->setAxes("step", "step time", ValueKind::Seconds);
    loss_->setTitle("Loss");
    loss_->setAxes("step", "loss (nats/token)", ValueKind::Plain);
    mfu_->setTitle("MFU");
    mfu_->setAxes("step", "MFU (% of peak)", ValueKind::Plain);
    gradNorm_->setTitle("Gradient norm");
    gradNorm_->setAxes("step", "global gradient norm", ValueKind::Plain);
    auto* training = new QWidget;
    auto* grid = new QGridLayout(training);
    grid->addWidget(throughput_, 0, 0);
    grid->addWidget(stepTime_, 0, 1);
    grid->addWidget(loss_, 1, 0);
    grid->addWidget(mfu_, 1, 1);
    grid->addWidget(gradNorm_, 2, 0, 1, 2);
    tabs_->addTab(training, "Training");

    memory_->setTitle("Memory per rank, measured, against the planner");
    tabs_->addTab(memory_, "Memory");

    measured_->setTitle("Measured pipeline");
    simulated_->setTitle("Simulated pipeline");
    auto* pipeline = new QWidget;
    auto* pv = new QVBoxLayout(pipeline);
    pipelineNote_->setWordWrap(true);
    pv->addWidget(pipelineNote_);
    pv->addWidget(measured_, 1);
    pv->addWidget(simulated_, 1);
    tabs_->addTab(pipeline, "Pipeline");

    tabs_->addTab(makeTable(communication_), "Communication");
    tabs_->addTab(makeTable(ranks_), "Ranks");
    tabs_->addTab(makeTable(comparison_), "Predicted vs measured");
    p->addWidget(tabs_, 1);
    panel_->setPicture(picture);
    panel_->setLesson(
        id(), "A run of the session's model and layout, live: each rank's throughput, step time "
              "and memory beside what the planner predicted (dashed), the pipeline as the ranks "
              "measured it beside the simulated one, and each parallel axis's communication. A "
              "rank that falls behind or stops is named in the verdict. <b>Try:</b> open a small "
              "CPU session (docs/sessions/cpu-gpt-dp2-pp2.shardscope), start it on this "
              "machine, stop it and resume it from its checkpoint; open "
              "Predicted vs measured to see where the planner is off, and by how much.");
    connect(tabs_, &QTabWidget::currentChanged, this, [this] {
        if (chartsStale_)
            showCharts();
    });

    frame_.setSingleShot(true);
    frame_.setInterval(33); // at most ~30 redraws a second
    connect(&frame_, &QTimer::timeout, this, &MonitorPage::showData);
    heartbeat_.setInterval(1000);
    connect(&heartbeat_, &QTimer::timeout, this, &MonitorPage::scheduleFrame);
    connect(&controller_, &RunController::dataChanged, this, &MonitorPage::scheduleFrame);
    connect(&controller_, &RunController::output, this, [this](const QString& text) {
        log_->moveCursor(QTextCursor::End);
        log_->insertPlainText(text);
    });
    connect(&controller_, &RunController::stateChanged, this, [this](RunController::State s) {
        const bool active = s == RunController::State::Starting ||
                            s == RunController::State::Running ||
                            s == RunController::State::Stopping;
        if (active)
            heartbeat_.start();
        else
            heartbeat_.stop();
        updateButtons();
        scheduleFrame();
    });
    connect(doc_, &SessionDocument::changed, this, &MonitorPage::sessionChanged);
    form_->refresh();
    updateButtons();
    showData();
}

MonitorPage::~MonitorPage() = default;

void MonitorPage::buildForm() {
    form_->addSection("Launch");
    form_->addChoice(
        "target", "Target", "Where the ranks run", kTargets,
        [](const Session& s) { return qs(toString(s.launch.target)); },
        [](Session& s, const QString& k) {
            s.launch.target = launchTargetFromString(k.toStdString());
        });
    form_->addText(
        "runs-directory", "Runs directory",
        "Each run gets a directory here (on a filesystem every host sees at the same path: "
        "ranks write their checkpoint shards into it)",
        "runs", [](const Session& s) { return qs(s.launch.runsDirectory); },
        [](Session& s, const QString& v) { s.launch.runsDirectory = v.toStdString(); });
    form_->addSection("Training run");
    form_
        ->addInt(
            "steps", "Steps",
            "Optimizer steps (train.steps); 0: as many as the session's training tokens take", 0,
            1'000'000'000,
            [](const Session& s) {
                return int(std::clamp<std::int64_t>(s.train.steps, 0, 1'000'000'000));
            },
            [](Session& s, int v) { s.train.steps = v; })
        ->setSpecialValueText("from the training tokens");
    form_->addText(
        "data", "Data file",
        "A token file (nanoGPT or llm.c .bin) or text; empty: the synthetic Markov source, "
        "whose loss floor the engine knows exactly",
        "synthetic", [](const Session& s) { return qs(s.train.dataPath); },
        [](Session& s, const QString& v) { s.train.dataPath = v.toStdString(); });
    form_->addInt(
        "checkpoint-every", "Checkpoint every", "Steps between checkpoints (0: only at the end)", 0,
        1'000'000'000, [](const Session& s) { return int(s.train.checkpointEvery); },
        [](Session& s, int v) { s.train.checkpointEvery = v; });
    form_->addInt(
        "eval-every", "Validate every", "Steps between validation passes (0: only at the end)", 0,
        1'000'000'000, [](const Session& s) { return int(s.train.evalEvery); },
        [](Session& s, int v) { s.train.evalEvery = v; });

    form_->addSection("Hosts over ssh");
    auto* hosts = form_->addLines(
        "hosts", "Hosts",
        "One host per line with its ranks: HOST slots=N. mpirun starts the ranks there over "
        "ssh; each host needs the same shardscope-engine",
        "node1 slots=8\nnode2 slots=8", [](const Session& s) { return qs(s.launch.hostfile); },
        [](Session& s, const QString& v) { s.launch.hostfile = v.toStdString(); });
    // This machine's settings (kept in QSettings, never in a session file, which anyone may
    // share: these words reach ssh and mpirun).
    auto* ssh = machineSetting("ssh-options", "ssh options",
                               "Added to every ssh command (a port, a key). This machine's "
                               "setting: not saved in session files",
                               "-p 22 -i ~/.ssh/id_ed25519");
    auto* mpi = machineSetting("mpi-options", "mpirun options",
                               "Added to mpirun (e.g. --mca btl_tcp_if_include eth0). This "
                               "machine's setting: not saved in session files",
                               "");
    auto* remote = machineSetting("remote-engine", "Engine on the hosts",
                                  "The shardscope-engine to run on the hosts (empty: the same "
                                  "path as here). This machine's setting: not saved in session "
                                  "files",
                                  "");
    const auto onSsh = [](const Session& s) { return s.launch.target == LaunchTarget::Ssh; };
    for (QWidget* w : std::initializer_list<QWidget*>{hosts, ssh, mpi})
        form_->setEnabledWhen(w, onSsh);
    form_->setEnabledWhen(remote,
                          [](const Session& s) { return s.launch.target != LaunchTarget::Local; });

    form_->addSection("Slurm");
    auto* partition = form_->addText(
        "slurm-partition", "Partition", "sbatch --partition (empty: the default)", "",
        [](const Session& s) { return qs(s.launch.slurmPartition); },
        [](Session& s, const QString& v) { s.launch.slurmPartition = v.toStdString(); });
    auto* time = form_->addText(
        "slurm-time", "Time limit", "sbatch --time, e.g. 2:00:00 (empty: the partition's)", "",
        [](const Session& s) { return qs(s.launch.slurmTime); },
        [](Session& s, const QString& v) { s.launch.slurmTime = v.toStdString(); });
    const auto onSlurm = [](const Session& s) { return s.launch.target == LaunchTarget::Slurm; };
    form_->setEnabledWhen(partition, onSlurm);
    form_->setEnabledWhen(time, onSlurm);

    form_->addSection("Telemetry");
    form_->addText(
        "telemetry-address", "Listen on",
        "Empty: this machine's loopback (ranks on other hosts reach it through ssh reverse "
        "tunnels). HOST:PORT: the app listens there and the ranks connect to it (Slurm nodes)",
        "loopback", [](const Session& s) { return qs(s.launch.telemetryAddress); },
        [](Session& s, const QString& v) { s.launch.telemetryAddress = v.toStdString(); });
    form_->addDouble(
        "stall-report", "Report waits after", "A rank blocked this long says where (stall event)",
        0, 86400, 1, " s", [](const Session& s) { return s.launch.stallSeconds; },
        [](Session& s, double v) { s.launch.stallSeconds = v; });
    form_->addDouble(
        "watchdog", "Hang timeout", "A rank blocked this long ends the job (exit 5)", 0.1, 864000,
        1, " s", [](const Session& s) { return s.launch.watchdogSeconds; },
        [](Session& s, double v) { s.launch.watchdogSeconds = v; });
}

QLineEdit* MonitorPage::machineSetting(const QString& name, const QString& label,
                                       const QString& tip, const QString& placeholder) {
    auto* line = new QLineEdit;
    line->setObjectName(name);
    line->setPlaceholderText(placeholder);
    line->setToolTip(tip);
    line->setText(QSettings().value("launch/" + name).toString());
    connect(line, &QLineEdit::editingFinished, this,
            [line, name] { QSettings().setValue("launch/" + name, line->text()); });
    form_->addWidget(label, line);
    return line;
}

Session MonitorPage::sessionToLaunch() const {
    Session s = doc_->session();
    const auto text = [this](const char* name) {
        return findChild<QLineEdit*>(name)->text().toStdString();
    };
    s.launch.sshOptions = text("ssh-options");
    s.launch.mpiOptions = text("mpi-options");
    s.launch.remoteEngine = text("remote-engine");
    return s;
}

std::vector<Chart*> MonitorPage::charts() const {
    return {throughput_, stepTime_, loss_, mfu_, gradNorm_, memory_, measured_, simulated_};
}

std::vector<std::pair<QString, QAbstractItemModel*>> MonitorPage::tables() const {
    return {{"Ranks", ranks_},
            {"Predicted vs measured", comparison_},
            {"Communication per rank", communication_}};
}

bool MonitorPage::showView(const QString& view) {
    // "TAB", "at-P" or "TAB-at-P": a tab, and for a replayed run the moment P % into it.
    static const QStringList kViews{"training",      "memory", "pipeline",
                                    "communication", "ranks",  "comparison"};
    if (view.isEmpty())
        return true;
    QString tab = view;
    if (const qsizetype at = view.indexOf("at-"); at >= 0) {
        bool ok = false;
        const double percent = view.mid(at + 3).toDouble(&ok);
        if (!ok || percent < 0 || percent > 100 || !replay_)
            return false;
        setReplayPosition(percent / 100);
        tab = view.left(std::max<qsizetype>(0, at - 1));
        if (tab.isEmpty())
            tab = "training";
    }
    const int index = int(kViews.indexOf(tab));
    if (index < 0)
        return false;
    tabs_->setCurrentIndex(index);
    return true;
}

void MonitorPage::refresh() {
    const Session& s = doc_->session();
    start_->setToolTip(QString("Check, then start %1 (%2) on %3 rank(s)")
                           .arg(qs(s.model.name), qs(layoutSummary(s.parallel)))
                           .arg(s.parallel.worldSize()));
}

void MonitorPage::updateButtons() {
    using S = RunController::State;
    const S s = controller_.state();
    const bool active = s == S::Checking || s == S::Starting || s == S::Running || s == S::Stopping;
    start_->setEnabled(!active);
    stop_->setEnabled(s == S::Starting || s == S::Running);
    kill_->setEnabled(active);
    resume_->setEnabled(controller_.canResume());
}

void MonitorPage::scheduleFrame() {
    if (!frame_.isActive())
        frame_.start();
}

void MonitorPage::refreshNow() {
    frame_.stop();
    allCharts_ = true;
    showData();
    allCharts_ = false;
}

QString MonitorPage::openRun(const QString& dir) {
    try {
        replay_ = std::make_unique<watch::RunReplay>(watch::findRunFiles(dir.toStdString()));
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    other_.reset();
    findChild<QWidget*>("replay-bar")->setVisible(true);
    const QSignalBlocker block(replaySlider_);
    replaySlider_->setValue(1000);
    setReplayPosition(1.0);
    return {};
}

QString MonitorPage::compareRun(const QString& dir) {
    try {
        watch::RunState state;
        watch::readRun(watch::findRunFiles(dir.toStdString()), state);
        other_ = monitorData(state);
        otherName_ = QFileInfo(dir).fileName();
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    refreshNow();
    return {};
}

void MonitorPage::setReplayPosition(double fraction) {
    if (!replay_)
        return;
    fraction = std::clamp(fraction, 0.0, 1.0);
    const double t = replay_->duration() * fraction;
    replayLabel_->setText(
        QString("%1 of %2").arg(qs(formatSeconds(t)), qs(formatSeconds(replay_->duration()))));
    const QSignalBlocker block(replaySlider_);
    replaySlider_->setValue(int(std::lround(fraction * 1000)));
    scheduleFrame();
}

void MonitorPage::chooseRunDirectory(bool compare) {
    const QString dir = QFileDialog::getExistingDirectory(
        this, compare ? "Compare with run directory" : "Open run directory",
        qs(doc_->session().launch.runsDirectory));
    if (dir.isEmpty())
        return;
    const QString error = compare ? compareRun(dir) : openRun(dir);
    if (!error.isEmpty())
        panel_->setVerdict(error.toHtmlEscaped(), VerdictLevel::Bad);
}

void MonitorPage::showData() {
    if (replay_) {
        const double t = replay_->duration() * replaySlider_->value() / 1000.0;
        data_ = monitorData(replay_->at(t));
    } else {
        live_.read([this](const watch::RunState& run) {
            data_ = monitorData(run, {5.0, live_.now()});
        });
    }
    const MonitorData& d = data_;
    const watch::RunAnalysis& a = d.analysis;

    // Status: the launch, then what the telemetry says.
    QString status;
    if (replay_)
        status = "Replaying a run from its files.";
    else
        status = "<b>" + toString(controller_.state()) +
                 "</b>: " + controller_.message().toHtmlEscaped();
    if (!controller_.slurmJob().isEmpty())
        status += "<br>Slurm job " + controller_.slurmJob();
    if (!replay_ && controller_.state() != RunController::State::Idle)
        status += QString("<br>%1 of %2 ranks reported; step %3; %4 events; %5 connection(s) "
                          "refused (wrong token)")
                      .arg(d.ranksStarted)
                      .arg(std::max(d.info.worldSize, d.ranksStarted))
                      .arg(d.latestStep)
                      .arg(live_.events())
                      .arg(live_.refusedConnections());
    status_->setText(status);

    // The verdict: what is wrong, else how the run compares with its prediction.
    if (!d.info.known && d.analysis.health.empty()) {
        panel_->setVerdict("No run yet. Start one from the session (left), or open a run "
                           "directory to replay it.",
                           VerdictLevel::Warning);
    } else if (!a.diagnosis.empty()) {
        panel_->setVerdict(qs(a.diagnosis).toHtmlEscaped(), VerdictLevel::Bad);
    } else {
        QString text = QString("%1 rank(s), step %2").arg(d.ranksStarted).arg(d.latestStep);
        if (d.info.totalSteps > 0)
            text += QString(" of %1").arg(d.info.totalSteps);
        for (const watch::ComparisonRow& row : a.comparison)
            if (row.key == "tokens_per_s" && row.hasMeasured)
                text += QString(": %1 measured against %2 predicted (%3)")
                            .arg(valueText(row.measured, row.unit),
                                 row.hasPredicted ? valueText(row.predicted, row.unit) : "-",
                                 errorText(row.errorPercent()));
        for (const watch::Straggler& s : a.stragglers)
            text += QString(". Rank %1 on %2 is a straggler: %3 slower than its peers, costing "
                            "%4 tokens/s")
                        .arg(s.rank)
                        .arg(qs(s.host), qs(formatPercent(s.slowdown)),
                             qs(formatNumber(s.throughputCost, 3)));
        panel_->setVerdict(text.toHtmlEscaped() + ".",
                           a.stragglers.empty() ? VerdictLevel::Good : VerdictLevel::Warning);
    }

    // The charts of the tab in view now; the others when they come into view (or all, for an
    // export or a render: refreshNow).
    showCharts();

    // Tables.
    std::vector<QList<QStandardItem*>> rows;
    for (const watch::RankHealth& h : a.health) {
        const auto it =
            std::find_if(d.ranks.begin(), d.ranks.end(),
                         [&](const MonitorData::RankRow& r) { return r.rank == h.rank; });
        const bool known = it != d.ranks.end();
        rows.push_back(
            {figureItem(qs(watch::rankLabel(h)), h.rank),
             textItem(known ? QString("dp%1 tp%2 pp%3 cp%4")
                                  .arg(it->coord.dp)
                                  .arg(it->coord.tp)
                                  .arg(it->coord.pp)
                                  .arg(it->coord.cp)
                            : "-"),
             textItem(known ? it->host : "-"), textItem(watch::toString(h.status)),
             figureItem(known ? QString::number(it->step) : "0", known ? double(it->step) : 0),
             figureItem(known ? qs(formatNumber(it->tokensPerSecond, 4)) : "-",
                        known ? it->tokensPerSecond : 0,
                        "median tokens/s of the job as this rank timed its steps"),
             figureItem(known ? QString::number(it->missedEvents) : "0",
                        known ? double(it->missedEvents) : 0,
                        "events the stream's numbering says never arrived here (the files "
                        "have them)"),
             textItem(qs(h.detail), qs(h.detail))});
    }
    setRows(ranks_,
            {"rank", "coordinate", "host", "status", "step", "tokens/s", "missed", "detail"},
            std::move(rows));

    std::vector<Explanation> explanations;
    rows.clear();
    for (const watch::ComparisonRow& row : a.comparison) {
        QList<QStandardItem*> cells{
            textItem(qs(row.label), qs(row.how)),
            figureItem(row.hasPredicted ? valueText(row.predicted, row.unit) : "-", row.predicted,
                       qs(row.how)),
            figureItem(row.hasMeasured ? valueText(row.measured, row.unit) : "-", row.measured,
                       qs(row.how)),
            figureItem(errorText(row.errorPercent()), row.errorPercent(),
                       "(measured - predicted) / predicted")};
        if (other_) {
            QString theirs = "-";
            for (const watch::ComparisonRow& o : other_->analysis.comparison)
                if (o.key == row.key && o.hasMeasured)
                    theirs = valueText(o.measured, o.unit);
            cells.push_back(textItem(theirs));
        }
        rows.push_back(cells); // how each was obtained: the tooltips and the formula panel
        Explanation e;
        e.key = row.key;
        e.label = row.label;
        e.value = row.measured;
        e.display = watch::formatValue(row.measured, row.unit) + " measured, " +
                    (row.hasPredicted ? watch::formatValue(row.predicted, row.unit) : "-") +
                    " predicted (" + errorText(row.errorPercent()).toStdString() + ")";
        e.formula = "error = (measured - predicted) / predicted";
        e.substituted = row.how;
        e.source = "measured: the run's telemetry (engine/watch); predicted: engine/plan, in the "
                   "start event";
        explanations.push_back(e);
    }
    QStringList header{"figure", "predicted", "measured", "error"};
    if (other_)
        header << "measured in " + otherName_;
    setRows(comparison_, header, std::move(rows));
    panel_->setExplanations(explanations);

    rows.clear();
    for (const watch::AxisExposure& e : a.exposure)
        rows.push_back({figureItem(QString::number(e.rank), e.rank), textItem(qs(e.axis)),
                        figureItem(qs(formatSeconds(e.busy)), e.busy,
                                   "seconds per step with a transfer or collective in flight "
                                   "(union of its spans), median over steps"),
                        figureItem(qs(formatSeconds(e.exposed)), e.exposed,
                                   "seconds per step the rank was blocked on it (wait spans); "
                                   "for pp this includes the pipeline bubble"),
                        figureItem(qs(formatPercent(e.hidden())), e.hidden(),
                                   "1 - exposed / in flight: the share hidden behind compute")});
    setRows(communication_, {"rank", "axis", "in flight", "exposed", "hidden"}, std::move(rows));
    updateButtons();
    emit refreshed();
}

void MonitorPage::showCharts() {
    chartsStale_ = false;
    const int tab = allCharts_ ? -1 : tabs_->currentIndex();
    if (tab == -1 || tab == 0)
        showTraining();
    if (tab == -1 || tab == 1)
        showMemory();
    if (tab == -1 || tab == 2)
        showPipeline();
    chartsStale_ = tab != -1;
}

// Training plots, each against its prediction.
void MonitorPage::showTraining() {
    const MonitorData& d = data_;
    auto withOther = [this](std::vector<LiveLine> lines,
                            const MetricSeries& (*pick)(const MonitorData&)) {
        if (other_)
            for (const PlotLine& l : pick(*other_).lines)
                lines.push_back({otherName_ + ": " + l.name, l.x, l.y, true});
        return lines;
    };
    throughput_->setData(
        withOther(linesOf(d.throughput),
                  [](const MonitorData& m) -> const MetricSeries& { return m.throughput; }),
        bandOf(d.throughput));
    throughput_->setReference(predicted(d, "tokens_per_s"), "predicted");
    stepTime_->setData(
        withOther(linesOf(d.stepTime),
                  [](const MonitorData& m) -> const MetricSeries& { return m.stepTime; }),
        bandOf(d.stepTime));
    stepTime_->setReference(predicted(d, "step_time"), "predicted");
    mfu_->setData(withOther(linesOf(d.mfu),
                            [](const MonitorData& m) -> const MetricSeries& { return m.mfu; }),
                  bandOf(d.mfu));
    mfu_->setReference(predicted(d, "mfu") * 100, "predicted");
    gradNorm_->setData(linesOf(d.gradNorm), bandOf(d.gradNorm));
    std::vector<LiveLine> loss = withOther(
        linesOf(d.loss), [](const MonitorData& m) -> const MetricSeries& { return m.loss; });
    if (!d.validation.x.isEmpty())
        loss.push_back({d.validation.name, d.validation.x, d.validation.y, true});
    loss_->setData(std::move(loss));
    loss_->setReference(d.info.lossFloor ? *d.info.lossFloor : NAN, "loss floor of the data");
}

// Memory per rank against the planner's prediction for its stage.
void MonitorPage::showMemory() {
    std::vector<MemoryBar> bars;
    for (const watch::RankMemory& m : data_.analysis.memory) {
        // The planner predicts the model state and the activations, not the engine's
        // temporary buffers.
        MemoryBar bar{QString("rank %1").arg(m.rank),
                      breakdownOf(m.measured),
                      m.predicted.parameters + m.predicted.gradients + m.predicted.optimizer +
                          m.predicted.activations,
                      {true, true, true, true, false, false}};
        bars.push_back(bar);
    }
    memory_->setBars(std::move(bars), 0, {});
}

// The measured pipeline above the schedule simulated with its op costs, on one time axis.
void MonitorPage::showPipeline() {
    const MonitorData& d = data_;
    const watch::RunAnalysis& a = d.analysis;
    if (a.pipeline.ok()) {
        const double scale = std::max(a.pipeline.measured.makespan, a.pipeline.simulated.makespan);
        const int v =
            d.info.parallel.schedule == PipelineSchedule::Interleaved ? d.info.parallel.vpp : 1;
        measured_->setTimeline(
            a.pipeline.measured, v,
            QString("Measured, step %1: bubble %2, %3 (grey above: transfers in flight; red below: "
                    "blocked)")
                .arg(a.pipeline.step)
                .arg(qs(formatPercent(a.pipeline.measured.bubbleFraction)),
                     qs(formatSeconds(a.pipeline.measured.makespan))));
        measured_->setWaits(stripsOf(a.pipeline.waits));
        measured_->setTransfers(stripsOf(a.pipeline.transfers));
        measured_->setTimeScale(scale);
        simulated_->setTimeline(
            a.pipeline.simulated, v,
            QString("The schedule simulated with the measured F/B/W times: bubble %1, %2")
                .arg(qs(formatPercent(a.pipeline.simulated.bubbleFraction)),
                     qs(formatSeconds(a.pipeline.simulated.makespan))));
        simulated_->setTimeScale(scale);
        QString note = "Pipeline ranks of replica 0 (global ranks";
        for (int r : a.pipeline.rank)
            note += QString(" %1").arg(r);
        note += "). Bubble per pipeline rank, measured / simulated:";
        for (std::size_t r = 0; r < a.pipeline.measured.bubble.size(); ++r)
            note += QString(" %1: %2 / %3;")
                        .arg(r)
                        .arg(qs(formatPercent(a.pipeline.measured.bubble[r])),
                             r < a.pipeline.simulated.bubble.size()
                                 ? qs(formatPercent(a.pipeline.simulated.bubble[r]))
                                 : "-");
        pipelineNote_->setText(note);
    } else {
        measured_->clear(qs(a.pipeline.problem));
        simulated_->clear({});
        pipelineNote_->setText(qs(a.pipeline.problem));
    }
}

QString MonitorPage::reportHtml() const {
    const auto& lines = throughput_->lines();
    if (std::none_of(lines.begin(), lines.end(), [](const LiveLine& l) { return !l.x.empty(); }))
        return {}; // no run started or opened: nothing measured to report
    QString html = "<h2>Training run</h2><p>" + panel_->verdictText() + "</p>";
    html += "<p><img src=\"chart:0\" width=\"480\"> <img src=\"chart:1\" width=\"480\"></p>";
    html += "<p><img src=\"chart:2\" width=\"480\"> <img src=\"chart:3\" width=\"480\"></p>";
    html += "<h3>Predicted against measured</h3>" + tableHtml(*comparison_);
    html += "<h3>Ranks</h3>" + tableHtml(*ranks_);
    html += "<p><img src=\"chart:5\" width=\"640\"></p>";
    html += "<p><img src=\"chart:6\" width=\"640\"></p><p><img src=\"chart:7\" width=\"640\"></p>";
    html += "<h3>Communication per rank</h3>" + tableHtml(*communication_);
    return html;
}

} // namespace shardscope
