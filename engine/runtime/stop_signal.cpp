#include "stop_signal.h"

#include <atomic>
#include <csignal>

namespace shardscope {

namespace {
std::atomic<int> pendingStop{0};

extern "C" void onStopSignal(int signal) {
    pendingStop.store(signal);
    std::signal(signal, SIG_DFL);
}
} // namespace

StopSignalHandlers::StopSignalHandlers()
    : previousInt_(std::signal(SIGINT, onStopSignal)),
      previousTerm_(std::signal(SIGTERM, onStopSignal)),
      previousUsr1_(std::signal(SIGUSR1, onStopSignal)) {}

StopSignalHandlers::~StopSignalHandlers() {
    std::signal(SIGINT, previousInt_);
    std::signal(SIGTERM, previousTerm_);
    std::signal(SIGUSR1, previousUsr1_);
}

int stopSignal() {
    return pendingStop.load();
}
void requestStop(int signal) {
    pendingStop.store(signal);
}
void clearStopRequest() {
    pendingStop.store(0);
}

} // namespace shardscope
