// The commands that start a training run: on this machine (the engine's own --ranks, which runs
// mpirun), on hosts over ssh (mpirun with ssh as its agent, reverse tunnels for telemetry), or
// through Slurm (an sbatch script whose srun starts every rank). Every command is a program and
// its arguments for QProcess, never a shell line: host names, paths and arguments cannot inject
// a command. The one place a shell reads our words is the remote side of ssh; there every word
// is quoted.
#pragma once

#include "session.h"

#include <QString>
#include <QStringList>
#include <vector>

namespace shardscope {

struct HostSlots {
    QString host;      // a name or address, optionally user@
    int slotCount = 1; // ranks it takes
};

// A host name for mpirun and ssh: letters, digits, '.', '-', '_' (and one "user@" in front), not
// starting with '-'. Returns why not, or an empty string.
QString hostNameProblem(const QString& host);
// Hostfile lines "HOST [slots=N]" (# starts a comment). Throws InputError naming the line.
std::vector<HostSlots> parseHostfile(const QString& text);
// A word for a POSIX shell: single-quoted, ' written as '\''.
QString shellQuote(const QString& word);
// Words of a user's option text ("-p 2222 -i key"), split on whitespace; "" quotes and ''
// quotes group words as a shell would, but nothing is expanded.
QStringList splitOptions(const QString& text);

struct Command {
    QString program;
    QStringList arguments;
};

struct LaunchRequest {
    LaunchSettings settings;
    QString engine;       // this machine's shardscope-engine (absolute path)
    QString configPath;   // the run config the app wrote (absolute)
    QString runDirectory; // absolute
    int ranks = 1;        // the layout's world size
    QString telemetryUrl; // tcp://HOST:PORT or unix:PATH (a local run) the ranks connect to
    bool resume = false;
    std::vector<HostSlots> hosts; // ssh: parsed from settings.hostfile
    bool runningAsRoot = false;   // mpirun refuses root unless told
};

// The engine's pre-launch check: `train --config C --ranks N --check`. Exit 2 with the reason
// when the run cannot start; nothing is created.
Command checkCommand(const LaunchRequest& r);

// This machine: the engine itself (`--ranks N` starts mpirun with the cores shared out).
Command localCommand(const LaunchRequest& r);

// Hosts over ssh: mpirun with --host h1:s1,h2:s2, ssh (with the user's options) as its agent,
// the token passed by name (-x), never by value. Throws InputError for a bad host list.
Command sshCommand(const LaunchRequest& r);
// Keeps `port` on `host`'s loopback forwarded to the app's `port` on this one, for the ranks
// there. ExitOnForwardFailure: a port taken there fails at once; otherwise the remote command
// prints "shardscope-tunnel-ready" (the forward stands) and waits.
Command tunnelCommand(const LaunchSettings& s, const HostSlots& host, int port);
// Runs `shardscope-engine version --json` on `host` (every word quoted for its shell).
Command remoteVersionCommand(const LaunchSettings& s, const HostSlots& host, const QString& engine);

// Slurm: the batch script, and the sbatch command that submits it. The script holds no token:
// sbatch passes the submitting environment (where the token is) to the job.
QString slurmScript(const LaunchRequest& r);
Command sbatchCommand(const QString& scriptPath);

// The engine arguments every target shares: train --config C --out D --telemetry U [--resume].
QStringList engineArguments(const LaunchRequest& r);

} // namespace shardscope
