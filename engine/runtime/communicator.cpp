#include "communicator.h"

namespace shardscope {

Request::~Request() {
    if (pending_) {
        try {
            pending_->wait();
        } catch (...) {
            // A failed transfer was already reported by whoever waited first; a destructor
            // must not throw.
        }
    }
}

void Request::wait() {
    if (!pending_)
        return;
    pending_->wait();
    pending_.reset();
}

bool Request::done() {
    if (!pending_)
        return true;
    if (!pending_->test())
        return false;
    pending_.reset();
    return true;
}

void waitAll(std::vector<Request>& requests) {
    for (Request& r : requests)
        r.wait();
}

} // namespace shardscope
