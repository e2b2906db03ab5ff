#include "launch_plan.h"

#include "core/error.h"

#include <QRegularExpression>

namespace shardscope {

namespace {

// The ssh options every launch command uses: never ask a question the app cannot answer.
QStringList sshBase(const LaunchSettings& s) {
    QStringList args = splitOptions(QString::fromStdString(s.sshOptions));
    args << "-o"
         << "BatchMode=yes"
         << "-o"
         << "ConnectTimeout=10";
    return args;
}

QString hostList(const std::vector<HostSlots>& hosts) {
    QStringList parts;
    for (const HostSlots& h : hosts)
        parts << QString("%1:%2").arg(h.host).arg(h.slotCount);
    return parts.join(',');
}

QString remoteEngineOf(const LaunchRequest& r) {
    return r.settings.remoteEngine.empty() ? r.engine
                                           : QString::fromStdString(r.settings.remoteEngine);
}

} // namespace

QString hostNameProblem(const QString& host) {
    static const QRegularExpression valid("^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+$");
    if (host.isEmpty())
        return "an empty host name";
    if (host.startsWith('-') || host.contains("@-"))
        return "host '" + host + "' starts with '-', which ssh and mpirun would read as an option";
    if (!valid.match(host).hasMatch())
        return "host '" + host +
               "' has characters a host name cannot have (only letters, digits, '.', '-', '_' "
               "and one user@ in front)";
    return {};
}

std::vector<HostSlots> parseHostfile(const QString& text) {
    std::vector<HostSlots> hosts;
    const QStringList lines = text.split('\n');
    if (lines.size() > 100000)
        throw InputError("the host list has more than 100,000 lines");
    for (int i = 0; i < lines.size(); ++i) {
        QString line = lines[i];
        if (const qsizetype hash = line.indexOf('#'); hash >= 0)
            line.truncate(hash);
        const QStringList words = line.split(QRegularExpression("\\s+"), Qt::SkipEmptyParts);
        if (words.isEmpty())
            continue;
        const QString where = QString("host list line %1: ").arg(i + 1);
        if (const QString problem = hostNameProblem(words[0]); !problem.isEmpty())
            throw InputError((where + problem).toStdString());
        HostSlots h{words[0], 1};
        for (int w = 1; w < words.size(); ++w) {
            bool ok = false;
            const int count = words[w].startsWith("slots=") ? words[w].mid(6).toInt(&ok) : 0;
            if (!ok || count < 1 || count > 4096)
                throw InputError((where + "'" + words[w] +
                                  "' is not slots=N with N from 1 to 4096 (write: HOST slots=8)")
                                     .toStdString());
            h.slotCount = count;
        }
        hosts.push_back(h);
    }
    return hosts;
}

QString shellQuote(const QString& word) {
    QString quoted = word;
    quoted.replace('\'', "'\\''");
    return "'" + quoted + "'";
}

QStringList splitOptions(const QString& text) {
    QStringList words;
    QString word;
    bool inWord = false;
    QChar quote;
    for (const QChar c : text) {
        if (!quote.isNull()) {
            if (c == quote)
                quote = QChar();
            else
                word += c;
            continue;
        }
        if (c == '"' || c == '\'') {
            quote = c;
            inWord = true;
        } else if (c.isSpace()) {
            if (inWord)
                words << word;
            word.clear();
            inWord = false;
        } else {
            word += c;
            inWord = true;
        }
    }
    if (inWord)
        words << word;
    return words;
}

QStringList engineArguments(const LaunchRequest& r) {
    QStringList args{"train", "--config", r.configPath, "--out", r.runDirectory};
    if (!r.telemetryUrl.isEmpty())
        args << "--telemetry" << r.telemetryUrl;
    if (r.resume)
        args << "--resume";
    return args;
}

Command checkCommand(const LaunchRequest& r) {
    QStringList args{"train",
                     "--config",
                     r.configPath,
                     "--out",
                     r.runDirectory,
                     "--ranks",
                     QString::number(r.ranks),
                     "--check"};
    if (r.resume)
        args << "--resume";
    return {r.engine, args};
}

Command localCommand(const LaunchRequest& r) {
    QStringList args = engineArguments(r);
    if (r.ranks > 1)
        args << "--ranks" << QString::number(r.ranks);
    return {r.engine, args};
}

Command sshCommand(const LaunchRequest& r) {
    if (r.hosts.empty())
        throw InputError("no hosts: write one HOST slots=N per line in the host list");
    int total = 0;
    for (const HostSlots& h : r.hosts) {
        if (const QString problem = hostNameProblem(h.host); !problem.isEmpty())
            throw InputError(problem.toStdString());
        total += h.slotCount;
    }
    if (total < r.ranks)
        throw InputError("the hosts have " + std::to_string(total) + " slots for " +
                         std::to_string(r.ranks) + " ranks: add hosts or slots");
    // mpirun splits its agent on spaces, so each ssh word is quoted for that split.
    QStringList agent{"ssh"};
    for (const QString& word : sshBase(r.settings))
        agent << (word.contains(' ') ? shellQuote(word) : word);
    QStringList args{"-n", QString::number(r.ranks), "--host", hostList(r.hosts), "--mca",
                     "plm_rsh_agent", agent.join(' '),
                     // The token travels by name in mpirun's environment forwarding, never on a
                     // command line where ps would show it.
                     "-x", "SHARDSCOPE_TELEMETRY_TOKEN"};
    if (r.runningAsRoot)
        args << "--allow-run-as-root";
    args << splitOptions(QString::fromStdString(r.settings.mpiOptions));
    args << remoteEngineOf(r) << engineArguments(r);
    return {"mpirun", args};
}

Command tunnelCommand(const LaunchSettings& s, const HostSlots& host, int port) {
    QStringList args = sshBase(s);
    args << "-T"
         << "-o"
         << "ExitOnForwardFailure=yes"
         << "-R" << QString("%1:127.0.0.1:%1").arg(port) << "--" << host.host
         << "echo shardscope-tunnel-ready; exec sleep 2147483647";
    return {"ssh", args};
}

Command remoteVersionCommand(const LaunchSettings& s, const HostSlots& host,
                             const QString& engine) {
    QStringList args = sshBase(s);
    args << "--" << host.host
         << (shellQuote(engine) + " " + shellQuote("version") + " " + shellQuote("--json"));
    return {"ssh", args};
}

QString slurmScript(const LaunchRequest& r) {
    // #SBATCH lines are not a shell's: a value must be one plain word.
    static const QRegularExpression plain(
        QRegularExpression::anchoredPattern("[A-Za-z0-9_,:./+=-]*")); // no "$" before a '\n'

    const auto check = [](const QString& what, const QString& value) {
        if (!plain.match(value).hasMatch())
            throw InputError((what + " '" + value +
                              "' has characters a Slurm directive cannot take (spaces, quotes, "
                              "line breaks); choose a plainer one")
                                 .toStdString());
    };
    check("the run directory", r.runDirectory);
    check("the Slurm partition", QString::fromStdString(r.settings.slurmPartition));
    check("the Slurm time limit", QString::fromStdString(r.settings.slurmTime));
    QStringList lines{"#!/bin/bash",
                      "# Written by Shardscope: one training run, every rank started by srun.",
                      "#SBATCH --job-name=shardscope", QString("#SBATCH --ntasks=%1").arg(r.ranks),
                      "#SBATCH --output=" + r.runDirectory + ".slurm-%j.out"};
    if (!r.settings.slurmPartition.empty())
        lines << "#SBATCH --partition=" + QString::fromStdString(r.settings.slurmPartition);
    if (!r.settings.slurmTime.empty())
        lines << "#SBATCH --time=" + QString::fromStdString(r.settings.slurmTime);
    // A rank whose watchdog ends it (a hang) exits 5 on its own; srun ends the others.
    QStringList command{"srun", "--mpi=pmix", "--kill-on-bad-exit=1", remoteEngineOf(r)};
    command << engineArguments(r);
    for (QString& word : command)
        word = shellQuote(word);
    lines << ""
          << "exec " + command.join(' ');
    return lines.join('\n') + "\n";
}

Command sbatchCommand(const QString& scriptPath) {
    return {"sbatch", {"--parsable", scriptPath}};
}

} // namespace shardscope
