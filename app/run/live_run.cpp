#include "live_run.h"

namespace shardscope {

bool LiveRun::add(const nlohmann::json& event) {
    {
        std::lock_guard lock(mutex_);
        state_.add(event, now());
    }
    events_.fetch_add(1);
    return markDirty();
}

bool LiveRun::connectionClosed(int rank) {
    {
        std::lock_guard lock(mutex_);
        state_.connectionClosed(rank, now());
    }
    return markDirty();
}

bool LiveRun::launcherNotice(const watch::LauncherNotice& notice) {
    {
        std::lock_guard lock(mutex_);
        state_.launcherNotice(notice);
    }
    return markDirty();
}

bool LiveRun::refused() {
    refused_.fetch_add(1);
    return markDirty();
}

bool LiveRun::repeated() {
    repeated_.fetch_add(1);
    return false; // a copy changes nothing worth a redraw
}

void LiveRun::read(const std::function<void(const watch::RunState&)>& read) {
    dirty_.store(false);
    std::lock_guard lock(mutex_);
    read(state_);
}

void LiveRun::reset() {
    std::lock_guard lock(mutex_);
    state_ = watch::RunState();
    refused_ = 0;
    repeated_ = 0;
    events_ = 0;
    dirty_ = true;
}

} // namespace shardscope
