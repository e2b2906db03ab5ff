#include "local_ranks.h"

#include "core/error.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <net/if.h>
#include <sched.h>
#include <stdexcept>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace shardscope::engine_cli {
namespace {

std::string lastError(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

bool writeFile(const char* path, const std::string& text) {
    const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    ::close(fd);
    return ok;
}

// A new namespace's loopback starts down; mpirun and the ranks need it up.
std::string loopbackUp() {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return lastError("a socket to configure the loopback interface");
    ifreq request{};
    std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
    std::string why;
    if (::ioctl(fd, SIOCGIFFLAGS, &request) != 0) {
        why = lastError("reading the loopback interface's flags");
    } else {
        request.ifr_flags = short(request.ifr_flags | IFF_UP);
        if (::ioctl(fd, SIOCSIFFLAGS, &request) != 0)
            why = lastError("bringing the loopback interface up");
    }
    ::close(fd);
    return why;
}

[[noreturn]] void cannotUse(const std::string& why) {
    throw std::runtime_error("entered a private network namespace but " + why);
}

// Moves this process into a new network namespace whose only interface is loopback, brought up:
// as root a network namespace alone; otherwise (or where root may not, as in many containers)
// inside a user namespace that maps the user and group to themselves, so files and permissions
// are unchanged. A user namespace is only given to a single-threaded process. Returns "" when
// done, or why not with nothing changed; throws when the namespace was entered but could not be
// made usable (there is no way back out).
std::string enterPrivateNetwork() {
    if (::geteuid() == 0 && ::unshare(CLONE_NEWNET) == 0) {
        if (const std::string why = loopbackUp(); !why.empty())
            cannotUse(why);
        return "";
    }
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0)
        return lastError("creating a user and network namespace");
    if (!writeFile("/proc/self/setgroups", "deny") ||
        !writeFile("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
        !writeFile("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
        cannotUse(lastError("mapping the user into it"));
    if (const std::string why = loopbackUp(); !why.empty())
        cannotUse(why);
    return "";
}

void sayOnHostNetwork(const std::string& why, std::ostream& err) {
    err << "shardscope-engine: note: the ranks share this host's network, where mpirun's control "
           "port listens on every interface ("
        << why << ")\n";
}

// Returns only when mpirun cannot be started.
void execMpirun(const std::vector<std::string>& arguments) {
    std::vector<std::string> words{"mpirun"};
    words.insert(words.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (std::string& w : words)
        argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execvp("mpirun", argv.data());
}

std::string cannotStart() {
    return std::string("--ranks: cannot start mpirun (") + std::strerror(errno) +
           "); install openmpi-bin, or launch the ranks with mpirun or srun yourself";
}

// The signals the app and users stop or kill a job with, and the engine's own stop request.
constexpr int kPassedOn[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
volatile sig_atomic_t gMpirun = 0;

void passOn(int signal, siginfo_t* info, void*) {
    // A terminal's Ctrl-C reaches mpirun itself, which shares this process group; passing it on
    // as well would be a second Ctrl-C, mpirun's cue to abort without a clean stop.
    if (info->si_code == SI_KERNEL)
        return;
    if (gMpirun > 0)
        ::kill(pid_t(gMpirun), signal);
}

sigset_t passedOnSet() {
    sigset_t set;
    sigemptyset(&set);
    for (const int s : kPassedOn)
        sigaddset(&set, s);
    return set;
}

} // namespace

[[noreturn]] void runLocalRanks(const std::vector<std::string>& arguments,
                                const std::string& collector, std::ostream& err) {
    if (!collector.empty() && !collector.starts_with("unix:")) {
        sayOnHostNetwork("the telemetry collector " + collector +
                             " is reached over TCP; give --telemetry unix:PATH instead",
                         err);
        err.flush();
        execMpirun(arguments);
        throw InputError(cannotStart());
    }
    // This process has thread pools, and a user namespace is only given to a single-threaded
    // one: a child enters the namespace and becomes mpirun, this process passes signals on to it
    // and ends as it ends.
    const sigset_t passed = passedOnSet();
    sigset_t previous;
    ::sigprocmask(SIG_BLOCK, &passed, &previous); // none lost before the child's pid is known
    struct sigaction action {};
    action.sa_sigaction = passOn;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (const int s : kPassedOn)
        ::sigaction(s, &action, nullptr);
    std::cout.flush();
    err.flush();
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) {
        sayOnHostNetwork(lastError("cannot fork"), err);
        for (const int s : kPassedOn)
            ::signal(s, SIG_DFL);
        ::sigprocmask(SIG_SETMASK, &previous, nullptr);
        execMpirun(arguments);
        throw InputError(cannotStart());
    }
    if (child == 0) {
        // mpirun ends its ranks if this process is killed outright (the app's last resort).
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent)
            ::_exit(128 + SIGTERM);
        for (const int s : kPassedOn)
            ::signal(s, SIG_DFL);
        ::sigprocmask(SIG_SETMASK, &previous, nullptr);
        try {
            if (const std::string why = enterPrivateNetwork(); !why.empty())
                sayOnHostNetwork(why, err);
        } catch (const std::exception& e) {
            err << "shardscope-engine: internal error: " << e.what() << "\n";
            err.flush();
            ::_exit(1);
        }
        err.flush();
        execMpirun(arguments);
        err << "shardscope-engine: " << cannotStart() << "\n";
        err.flush();
        ::_exit(2);
    }
    gMpirun = child;
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) { // end as mpirun did, so whoever started us sees the same
        const int signal = WTERMSIG(status);
        ::signal(signal, SIG_DFL);
        ::raise(signal);
        std::_Exit(128 + signal);
    }
    std::exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

} // namespace shardscope::engine_cli
