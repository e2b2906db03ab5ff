// Starts, stops and follows one training run of the session's model and layout: writes its run
// config, opens the telemetry server with a fresh token, runs the engine's pre-launch check (and,
// for hosts over ssh, checks each host's engine), then starts the job on this machine, on hosts
// over ssh, or through Slurm, and reports how it goes. Lives on the GUI thread; processes are
// QProcess (no shell) and are never waited for on this thread.
#pragma once

#include "launch_plan.h"
#include "live_run.h"
#include "session.h"
#include "telemetry_server.h"

#include <QObject>
#include <QProcess>
#include <QString>
#include <QTemporaryDir>
#include <QTimer>
#include <memory>
#include <vector>

namespace shardscope {

class RunController : public QObject {
    Q_OBJECT
public:
    enum class State {
        Idle,
        Checking, // the engine's pre-launch check, each host's engine
        Starting, // the job is started; ranks are joining
        Running,  // every rank has sent its start event
        Stopping, // asked to checkpoint and end
        Finished, // the job ended with exit 0
        Failed,   // it could not start, or ended otherwise
    };

    RunController(LiveRun* live, QObject* parent = nullptr);
    ~RunController() override;

    // The engine on this machine: by default next to the app (installed) or in the build tree.
    void setEngine(const QString& path) { engine_ = path; }
    QString engine() const { return engine_; }
    static QString defaultEngine();

    // Starts a new run of `session` in a new directory under its launch settings' runs directory
    // (`name`, or the date and time). Returns at once; stateChanged() follows.
    void start(const Session& session, const QString& name = {});
    // Starts the stopped run again from its newest checkpoint, with the same config and target.
    void resume();
    // Asks the job to finish its step, checkpoint and end (SIGUSR1, forwarded to every rank).
    void stop();
    // Ends the job now: SIGTERM to the launcher (mpirun ends every rank), SIGKILL after 5 s;
    // scancel under Slurm.
    void kill();

    State state() const { return state_; }
    QString message() const { return message_; }
    QString runDirectory() const { return request_.runDirectory; }
    QString telemetryUrl() const { return request_.telemetryUrl; }
    quint16 telemetryPort() const { return server_.port(); } // 0 for a local run's Unix socket
    QString telemetrySocket() const { return server_.localPath(); }
    QString slurmJob() const { return slurmJob_; }
    QString slurmScriptText() const { return script_; }
    QString log() const { return log_; }
    bool canResume() const;
    // The token of the run in progress (the engine gets it through its environment).
    QString token() const { return token_; }
    LiveRun* live() const { return live_; }

signals:
    void stateChanged(shardscope::RunController::State state, const QString& message);
    void output(const QString& text); // what the launcher and checks print
    void refusedConnection(const QString& peer, const QString& reason);
    void dataChanged(); // new telemetry in the LiveRun

private:
    void begin(bool resume);
    void setState(State s, const QString& message);
    void fail(const QString& message);
    void runCheck();
    void checkHosts();
    void launch();
    void launchJob();
    void startTunnels();
    void submitSlurm();
    void pollSlurm();
    void watchRanks();
    void jobEnded(int exitCode, QProcess::ExitStatus status);
    void cleanUp();
    QProcess* process(const Command& command, bool withToken);
    static QString printed(QProcess* p, bool errors); // all it printed to stderr (or stdout)
    void appendLog(const QString& text);
    void readLauncherLine(const std::string& line); // a launcher's notice of a dead rank

    LiveRun* live_;
    std::unique_ptr<QTemporaryDir> socketDirectory_; // a local run's telemetry socket lives here
    TelemetryServer server_;
    QString engine_;
    Session session_;
    LaunchRequest request_;
    QString token_;
    State state_ = State::Idle;
    QString message_;
    QString log_;
    QString unfinishedLine_; // the log's last line until its end arrives
    QProcess* job_ = nullptr;
    std::vector<QProcess*> helpers_; // checks and tunnels: ended with the run
    int pendingHosts_ = 0;
    int pendingTunnels_ = 0;
    bool polling_ = false;
    int pollFailures_ = 0;
    QString slurmJob_, script_;
    QTimer poll_;      // Slurm's view of the job, and the ranks joining
    QTimer killTimer_; // SIGKILL when SIGTERM was not enough
};

QString toString(RunController::State s);

} // namespace shardscope
