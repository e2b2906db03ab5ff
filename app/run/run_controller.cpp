#include "run_controller.h"

#include "core/error.h"
#include "core/json_io.h"
#include "save_file.h"
#include "watch/launcher_notice.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHostInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkInterface>
#include <QProcessEnvironment>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <csignal>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

namespace shardscope {

namespace {

constexpr const char* kTokenVariable = "SHARDSCOPE_TELEMETRY_TOKEN";

QString randomToken() {
    QString token;
    for (int i = 0; i < 4; ++i)
        token += QString("%1").arg(QRandomGenerator::system()->generate64(), 16, 16, QChar('0'));
    return token;
}

// The last lines of what a process printed: enough to say why it failed.
QString tail(const QString& text, int lines = 12) {
    QStringList all = text.trimmed().split('\n');
    if (all.size() > lines)
        all = all.mid(all.size() - lines);
    return all.join('\n');
}

constexpr const char* kTunnelReady = "shardscope-tunnel-ready";

QString exitMeaning(int code) {
    switch (code) {
    case 2:
        return "bad input (the message above says what)";
    case 3:
        return "training failed (a non-finite loss, say)";
    case 4:
        return "a checkpoint failed its verification";
    case 5:
        return "the job hung and the watchdog ended it";
    default:
        return "exit code " + QString::number(code);
    }
}

// A host that is this machine (by name or by one of its addresses): mpirun starts its ranks
// without ssh, so neither an ssh check nor a tunnel applies.
bool isThisHost(const QString& host) {
    const QString name = host.section('@', -1);
    if (name == "localhost" || name == QHostInfo::localHostName())
        return true;
    const QHostAddress address(name);
    return !address.isNull() &&
           (address.isLoopback() || QNetworkInterface::allAddresses().contains(address));
}

} // namespace

QString toString(RunController::State s) {
    switch (s) {
    case RunController::State::Idle:
        return "idle";
    case RunController::State::Checking:
        return "checking";
    case RunController::State::Starting:
        return "starting";
    case RunController::State::Running:
        return "running";
    case RunController::State::Stopping:
        return "stopping";
    case RunController::State::Finished:
        return "finished";
    case RunController::State::Failed:
        return "failed";
    }
    return "?";
}

RunController::RunController(LiveRun* live, QObject* parent)
    : QObject(parent), live_(live), server_(live), engine_(defaultEngine()) {
    connect(&server_, &TelemetryServer::changed, this, &RunController::dataChanged);
    connect(&server_, &TelemetryServer::refusedConnection, this, &RunController::refusedConnection);
    poll_.setInterval(500);
    connect(&poll_, &QTimer::timeout, this, [this] {
        watchRanks();
        if (!slurmJob_.isEmpty())
            pollSlurm();
    });
    killTimer_.setSingleShot(true);
    killTimer_.setInterval(5000);
    connect(&killTimer_, &QTimer::timeout, this, [this] {
        if (job_ && job_->state() != QProcess::NotRunning)
            job_->kill();
    });
}

RunController::~RunController() {
    // A job this app started on this machine ends with it; a Slurm job runs on.
    poll_.stop();
    if (job_ && job_->state() != QProcess::NotRunning) {
        job_->disconnect(this);
        job_->terminate();
        if (!job_->waitForFinished(3000))
            job_->kill();
        job_->waitForFinished(1000);
    }
    cleanUp();
    server_.stop();
}

QString RunController::defaultEngine() {
    const QString here = QCoreApplication::applicationDirPath();
    for (const QString& candidate :
         {here + "/shardscope-engine", here + "/../engine/tools/shardscope-engine"})
        if (QFileInfo(candidate).isExecutable())
            return QFileInfo(candidate).canonicalFilePath();
    const QString onPath = QStandardPaths::findExecutable("shardscope-engine");
    return onPath.isEmpty() ? "shardscope-engine" : onPath;
}

bool RunController::canResume() const {
    return (state_ == State::Finished || state_ == State::Failed) &&
           !request_.runDirectory.isEmpty() &&
           QFileInfo(request_.runDirectory + "/checkpoints").isDir();
}

void RunController::setState(State s, const QString& message) {
    state_ = s;
    message_ = message;
    appendLog("[" + toString(s) + "] " + message + "\n");
    emit stateChanged(s, message);
}

void RunController::fail(const QString& message) {
    poll_.stop();
    cleanUp();
    setState(State::Failed, message);
}

void RunController::readLauncherLine(const std::string& line) {
    if (const auto notice = watch::parseLauncherNotice(line))
        if (live_->launcherNotice(*notice))
            emit dataChanged();
}

void RunController::appendLog(const QString& text) {
    // The launcher's word of a rank that died: for a rank on another host the only one.
    unfinishedLine_ += text;
    qsizetype from = 0;
    for (qsizetype nl; (nl = unfinishedLine_.indexOf('\n', from)) >= 0; from = nl + 1)
        readLauncherLine(unfinishedLine_.mid(from, nl - from).toStdString());
    unfinishedLine_ = unfinishedLine_.mid(from).right(4096);
    log_ += text;
    if (log_.size() > 1'000'000) // an hour of chatter is not kept whole
        log_ = log_.right(500'000);
    emit output(text);
}

QProcess* RunController::process(const Command& command, bool withToken) {
    auto* p = new QProcess(this);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    if (withToken)
        env.insert(kTokenVariable, token_);
    else
        env.remove(kTokenVariable);
    p->setProcessEnvironment(env);
    p->setProgram(command.program);
    p->setArguments(command.arguments);
    // A program that is not there never finishes: say so, and what to install.
    connect(p, &QProcess::errorOccurred, this, [this, p](QProcess::ProcessError e) {
        if (e != QProcess::FailedToStart || state_ == State::Finished || state_ == State::Failed)
            return;
        const QString name = QFileInfo(p->program()).fileName();
        const QString hint = name == "shardscope-engine"
                                 ? "build it, or install the shardscope-engine package"
                             : name == "ssh"    ? "install openssh-client"
                             : name == "mpirun" ? "install openmpi-bin"
                                                : "install Slurm's client commands (slurm-client)";
        fail("cannot start " + p->program() + " (" + p->errorString() + "): " + hint);
    });
    // What it prints goes to the log as it comes, and is kept for the handlers that read it.
    connect(p, &QProcess::readyReadStandardOutput, this, [this, p] {
        const QString text = QString::fromLocal8Bit(p->readAllStandardOutput());
        p->setProperty("out", (p->property("out").toString() + text).right(65536));
        appendLog(text);
    });
    connect(p, &QProcess::readyReadStandardError, this, [this, p] {
        const QString text = QString::fromLocal8Bit(p->readAllStandardError());
        p->setProperty("err", tail(p->property("err").toString() + text, 200));
        appendLog(text);
    });
    return p;
}

QString RunController::printed(QProcess* p, bool errors) {
    // Whatever is still unread, then all of it.
    if (errors)
        p->setProperty("err", p->property("err").toString() +
                                  QString::fromLocal8Bit(p->readAllStandardError()));
    else
        p->setProperty("out", p->property("out").toString() +
                                  QString::fromLocal8Bit(p->readAllStandardOutput()));
    return p->property(errors ? "err" : "out").toString();
}

void RunController::start(const Session& session, const QString& name) {
    if (state_ == State::Checking || state_ == State::Starting || state_ == State::Running ||
        state_ == State::Stopping) {
        emit stateChanged(state_, "a run is already in progress: stop it first");
        return;
    }
    session_ = session;
    const LaunchSettings& l = session.launch;
    const QString runs = QDir(QString::fromStdString(l.runsDirectory)).absolutePath();
    QString runName = name;
    if (runName.isEmpty()) {
        // Named by the date and time; a second run within the same second gets a suffix.
        const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss");
        runName = stamp;
        for (int n = 2; QFileInfo::exists(runs + "/" + runName) ||
                        QFileInfo::exists(runs + "/" + runName + ".launch.json");
             ++n)
            runName = stamp + "-" + QString::number(n);
    }
    request_ = LaunchRequest{};
    request_.settings = l;
    request_.engine = engine_;
    request_.runDirectory = runs + "/" + runName;
    request_.configPath = runs + "/" + runName + ".launch.json";
    request_.ranks = session.parallel.worldSize();
    request_.runningAsRoot = ::geteuid() == 0;
    if (QFileInfo::exists(request_.runDirectory)) {
        fail("the run directory " + request_.runDirectory +
             " already exists: choose another name, or resume that run");
        return;
    }
    try {
        if (l.target == LaunchTarget::Ssh)
            request_.hosts = parseHostfile(QString::fromStdString(l.hostfile));
    } catch (const InputError& e) {
        fail(QString::fromStdString(e.what()));
        return;
    }
    // The run config: the session's shared types, as the engine reads them.
    nlohmann::json config{
        {"model", session.model},
        {"parallel", session.parallel},
        {"train", session.train},
        {"engine",
         {{"stall_report_s", l.stallSeconds}, {"watchdog_timeout_s", l.watchdogSeconds}}}};
    if (!QDir().mkpath(runs)) {
        fail("cannot create the runs directory " + runs);
        return;
    }
    const QString error =
        saveFileAtomically(request_.configPath, QByteArray::fromStdString(config.dump(2) + "\n"));
    if (!error.isEmpty()) {
        fail(error);
        return;
    }
    begin(false);
}

void RunController::resume() {
    if (!canResume()) {
        emit stateChanged(state_, "nothing to resume: the last run has no checkpoint yet");
        return;
    }
    begin(true);
}

void RunController::begin(bool resume) {
    request_.resume = resume;
    polling_ = false;
    pollFailures_ = 0;
    pendingTunnels_ = 0;
    slurmJob_.clear();
    script_.clear();
    live_->reset();
    token_ = randomToken();
    const QString address = QString::fromStdString(request_.settings.telemetryAddress);
    if (request_.settings.target == LaunchTarget::Local && address.isEmpty()) {
        // The ranks of a local run live in a network namespace of their own (the engine's
        // --ranks), which a socket file reaches and this host's loopback does not.
        socketDirectory_ = std::make_unique<QTemporaryDir>(QDir::tempPath() + "/shardscope-XXXXXX");
        QString error;
        if (!socketDirectory_->isValid() ||
            !server_.startLocal(socketDirectory_->filePath("telemetry.sock"), token_, &error)) {
            fail(error.isEmpty() ? "cannot create a directory for the telemetry socket in " +
                                       QDir::tempPath() + ": " + socketDirectory_->errorString()
                                 : error);
            return;
        }
        request_.telemetryUrl = "unix:" + server_.localPath();
    } else {
        QHostAddress listenOn = QHostAddress::LocalHost;
        QString host = "127.0.0.1";
        quint16 port = 0;
        if (!address.isEmpty()) {
            const qsizetype colon = address.lastIndexOf(':');
            bool ok = false;
            port = colon > 0 ? address.mid(colon + 1).toUShort(&ok) : 0;
            host = colon > 0 ? address.left(colon) : QString();
            if (!ok || port == 0 || host.isEmpty()) {
                fail("telemetry address '" + address + "' is not HOST:PORT (e.g. login1:9400)");
                return;
            }
            // An address literal is listened on as it is; a name on every interface.
            listenOn =
                QHostAddress(host).isNull() ? QHostAddress(QHostAddress::Any) : QHostAddress(host);
        }
        QString error;
        const quint16 listening = server_.start(listenOn, port, token_, &error);
        if (listening == 0) {
            fail(error);
            return;
        }
        request_.telemetryUrl = QString("tcp://%1:%2").arg(host).arg(listening);
    }
    setState(State::Checking, "checking the config with the engine's pre-launch check");
    runCheck();
}

void RunController::runCheck() {
    QProcess* check = process(checkCommand(request_), false);
    helpers_.push_back(check);
    connect(check, &QProcess::finished, this, [this, check](int code, QProcess::ExitStatus) {
        if (state_ != State::Checking)
            return;
        if (code != 0) {
            QString why = tail(printed(check, true));
            why.remove(QRegularExpression("^shardscope-engine: "));
            fail("the engine's pre-launch check refused the run (exit " + QString::number(code) +
                 "); nothing was started:\n" + why);
            return;
        }
        if (request_.settings.target == LaunchTarget::Ssh)
            checkHosts();
        else
            launch();
    });
    check->start();
}

void RunController::checkHosts() {
    // This machine's engine first: what every host's must match.
    QProcess* local = process({engine_, {"version", "--json"}}, false);
    helpers_.push_back(local);
    connect(local, &QProcess::finished, this, [this, local](int code, QProcess::ExitStatus) {
        if (state_ != State::Checking)
            return;
        const QJsonObject mine = QJsonDocument::fromJson(printed(local, false).toUtf8()).object();
        if (code != 0 || mine.isEmpty()) {
            fail("this machine's engine does not say its version (" + engine_ + ")");
            return;
        }
        std::set<QString> seen;
        std::vector<HostSlots> hosts;
        for (const HostSlots& h : request_.hosts)
            if (!isThisHost(h.host) && seen.insert(h.host).second)
                hosts.push_back(h);
        if (hosts.empty()) {
            launch();
            return;
        }
        pendingHosts_ = int(hosts.size());
        const QString remote = request_.settings.remoteEngine.empty()
                                   ? engine_
                                   : QString::fromStdString(request_.settings.remoteEngine);
        setState(State::Checking,
                 QString("checking the engine on %1 host(s) over ssh").arg(pendingHosts_));
        for (const HostSlots& h : hosts) {
            QProcess* p = process(remoteVersionCommand(request_.settings, h, remote), false);
            helpers_.push_back(p);
            connect(p, &QProcess::finished, this,
                    [this, p, h, mine, remote](int exit, QProcess::ExitStatus) {
                        if (state_ != State::Checking)
                            return;
                        const QJsonObject theirs =
                            QJsonDocument::fromJson(printed(p, false).toUtf8()).object();
                        const QString install =
                            "; install shardscope-engine " + mine["version"].toString() +
                            " there (the shardscope-engine package), or set the engine path on "
                            "the hosts";
                        if (exit != 0 || theirs.isEmpty()) {
                            fail("host " + h.host + ": cannot run " + remote + " over ssh (" +
                                 tail(printed(p, true), 3) + ")" + install);
                            return;
                        }
                        if (theirs["version"] != mine["version"] ||
                            theirs["telemetry_schema"] != mine["telemetry_schema"]) {
                            fail("host " + h.host + " has shardscope-engine " +
                                 theirs["version"].toString() + " (telemetry schema " +
                                 QString::number(theirs["telemetry_schema"].toInt()) +
                                 "), this machine " + mine["version"].toString() + install);
                            return;
                        }
                        appendLog("host " + h.host + ": shardscope-engine " +
                                  theirs["version"].toString() + ", " + theirs["mpi"].toString() +
                                  "\n");
                        if (--pendingHosts_ == 0)
                            launch();
                    });
            p->start();
        }
    });
    local->start();
}

void RunController::startTunnels() {
    std::set<QString> seen;
    for (const HostSlots& h : request_.hosts) {
        if (isThisHost(h.host) || !seen.insert(h.host).second)
            continue;
        QProcess* tunnel = process(tunnelCommand(request_.settings, h, server_.port()), false);
        helpers_.push_back(tunnel);
        ++pendingTunnels_;
        // The remote command prints a line once the forward stands (ssh exits first when it
        // cannot: ExitOnForwardFailure), so no rank starts before its telemetry has a way home,
        // and none sends its token to whatever else holds that port there.
        connect(tunnel, &QProcess::readyReadStandardOutput, this, [this, tunnel] {
            if (tunnel->property("ready").toBool() ||
                !printed(tunnel, false).contains(kTunnelReady))
                return;
            tunnel->setProperty("ready", true);
            if (--pendingTunnels_ == 0 && state_ == State::Checking)
                launchJob();
        });
        connect(tunnel, &QProcess::finished, this,
                [this, h, tunnel](int code, QProcess::ExitStatus) {
                    if (!tunnel->property("ready").toBool() && state_ == State::Checking) {
                        fail("the telemetry tunnel to " + h.host + " could not forward port " +
                             QString::number(server_.port()) +
                             " (taken there?): " + tail(printed(tunnel, true), 3));
                        return;
                    }
                    if (state_ == State::Starting || state_ == State::Running)
                        appendLog("the telemetry tunnel to " + h.host + " ended (exit " +
                                  QString::number(code) +
                                  "); its ranks' telemetry stays in their files\n");
                });
        tunnel->start();
    }
    if (pendingTunnels_ == 0)
        launchJob();
    else
        setState(State::Checking, "opening the telemetry tunnels");
}

void RunController::launch() {
    switch (request_.settings.target) {
    case LaunchTarget::Local:
        launchJob();
        return;
    case LaunchTarget::Ssh:
        pendingTunnels_ = 0;
        if (request_.settings.telemetryAddress.empty())
            startTunnels(); // then launchJob()
        else
            launchJob(); // the ranks reach the named address themselves
        return;
    case LaunchTarget::Slurm:
        submitSlurm();
        return;
    }
}

void RunController::launchJob() {
    try {
        job_ = process(request_.settings.target == LaunchTarget::Ssh ? sshCommand(request_)
                                                                     : localCommand(request_),
                       true);
    } catch (const InputError& e) {
        fail(QString::fromStdString(e.what()));
        return;
    }
    connect(job_, &QProcess::finished, this, &RunController::jobEnded);
    setState(State::Starting, QString("starting %1 rank(s)").arg(request_.ranks));
    job_->start();
    poll_.start();
}

void RunController::submitSlurm() {
    try {
        script_ = slurmScript(request_);
    } catch (const InputError& e) {
        fail(QString::fromStdString(e.what()));
        return;
    }
    const QString path = request_.runDirectory + ".sbatch";
    if (const QString error = saveFileAtomically(path, script_.toUtf8()); !error.isEmpty()) {
        fail(error);
        return;
    }
    appendLog("the batch script, " + path + ":\n" + script_);
    QProcess* sbatch = process(sbatchCommand(path), true); // the job inherits the token
    helpers_.push_back(sbatch);
    connect(sbatch, &QProcess::finished, this, [this, sbatch](int code, QProcess::ExitStatus) {
        const QString out = printed(sbatch, false).trimmed();
        if (code != 0 || out.isEmpty()) {
            fail("sbatch refused the job (exit " + QString::number(code) + "):\n" +
                 tail(printed(sbatch, true)));
            return;
        }
        slurmJob_ = out.section(';', 0, 0);
        setState(State::Starting, "submitted as Slurm job " + slurmJob_);
        poll_.start();
    });
    sbatch->start();
}

void RunController::pollSlurm() {
    if (state_ != State::Starting && state_ != State::Running && state_ != State::Stopping)
        return;
    if (polling_)
        return; // one scontrol at a time, however slow the controller is
    polling_ = true;
    auto* scontrol = process({"scontrol", {"show", "job", slurmJob_}}, false);
    helpers_.push_back(scontrol);
    connect(scontrol, &QProcess::finished, this, [this, scontrol](int code, QProcess::ExitStatus) {
        polling_ = false;
        const QString text = printed(scontrol, false);
        const QString jobState = QRegularExpression("JobState=(\\w+)").match(text).captured(1);
        if (code != 0 || jobState.isEmpty()) {
            // slurmctld busy or restarting: the job's fate is unknown, so ask again. A job
            // Slurm no longer knows at all ended out of sight: its output file has the rest.
            if (printed(scontrol, true).contains("Invalid job id")) {
                poll_.stop();
                fail("Slurm no longer knows job " + slurmJob_ +
                     "; its output: " + request_.runDirectory + ".slurm-" + slurmJob_ + ".out");
            } else if (++pollFailures_ == 1 || pollFailures_ % 20 == 0) {
                appendLog("scontrol could not say how job " + slurmJob_ + " is (" +
                          tail(printed(scontrol, true), 1) + "); asking again\n");
            }
            return;
        }
        pollFailures_ = 0;
        if (jobState == "PENDING" && state_ == State::Starting)
            message_ = "Slurm job " + slurmJob_ + " is waiting for resources";
        static const QStringList kDone{"COMPLETED", "FAILED",    "CANCELLED",
                                       "TIMEOUT",   "NODE_FAIL", "OUT_OF_MEMORY",
                                       "PREEMPTED", "BOOT_FAIL", "DEADLINE"};
        if (!kDone.contains(jobState))
            return;
        poll_.stop();
        // ExitCode=status:signal of the batch script (its exec'd srun).
        const auto exit = QRegularExpression("ExitCode=(\\d+):(\\d+)").match(text);
        const int status = exit.captured(1).toInt(), signal = exit.captured(2).toInt();
        if (jobState == "COMPLETED" && status == 0 && signal == 0) {
            jobEnded(0, QProcess::NormalExit);
            return;
        }
        // srun's word of a rank that died is in the job's output file, not in anything we read.
        QFile output(request_.runDirectory + ".slurm-" + slurmJob_ + ".out");
        if (output.open(QIODevice::ReadOnly)) {
            output.seek(std::max<qint64>(0, output.size() - 65536));
            for (const QByteArray& line : output.readAll().split('\n'))
                readLauncherLine(line.toStdString());
        }
        fail("Slurm job " + slurmJob_ + " ended " + jobState + " (" +
             (signal ? "signal " + QString::number(signal) : exitMeaning(status)) +
             "); its output: " + request_.runDirectory + ".slurm-" + slurmJob_ + ".out");
    });
    scontrol->start();
}

void RunController::watchRanks() {
    if (state_ != State::Starting)
        return;
    int started = 0;
    live_->read([&](const watch::RunState& run) {
        for (const auto& [rank, r] : run.ranks())
            started += r.started;
    });
    if (started >= request_.ranks)
        setState(State::Running, QString("%1 rank(s) running").arg(request_.ranks));
    else
        message_ =
            QString("starting: %1 of %2 ranks have reported").arg(started).arg(request_.ranks);
}

void RunController::jobEnded(int exitCode, QProcess::ExitStatus status) {
    poll_.stop();
    killTimer_.stop();
    watchRanks();
    const QString output = job_ ? printed(job_, true) : QString();
    cleanUp();
    if (status == QProcess::NormalExit && exitCode == 0) {
        setState(State::Finished, "the run ended cleanly; its files: " + request_.runDirectory);
        return;
    }
    const QString why =
        status == QProcess::CrashExit ? QString("the launcher was killed") : exitMeaning(exitCode);
    setState(State::Failed,
             "the job ended: " + why + (output.isEmpty() ? "" : "\n" + tail(output)));
}

void RunController::stop() {
    if (state_ == State::Checking) {
        fail("cancelled during the checks: nothing was started");
        return;
    }
    if (state_ != State::Starting && state_ != State::Running)
        return;
    if (!slurmJob_.isEmpty()) {
        QProcess* scancel = process({"scancel", {"--signal=USR1", slurmJob_}}, false);
        helpers_.push_back(scancel);
        scancel->start();
    } else if (job_ && job_->processId() > 0) {
        ::kill(pid_t(job_->processId()), SIGUSR1);
    }
    setState(State::Stopping, "asked every rank to finish its step, checkpoint and end");
}

void RunController::kill() {
    if (state_ == State::Checking) {
        fail("cancelled during the checks: nothing was started");
        return;
    }
    if (!slurmJob_.isEmpty() &&
        (state_ == State::Starting || state_ == State::Running || state_ == State::Stopping)) {
        QProcess* scancel = process({"scancel", {slurmJob_}}, false);
        helpers_.push_back(scancel);
        scancel->start();
        return;
    }
    if (job_ && job_->state() != QProcess::NotRunning) {
        job_->terminate();
        killTimer_.start();
    }
}

void RunController::cleanUp() {
    for (QProcess* p : helpers_) {
        p->disconnect(this);
        if (p->state() != QProcess::NotRunning) {
            p->terminate();
            if (!p->waitForFinished(1000))
                p->kill();
        }
        p->deleteLater();
    }
    helpers_.clear();
    if (job_ && job_->state() == QProcess::NotRunning) {
        job_->deleteLater();
        job_ = nullptr;
    }
}

} // namespace shardscope
