// Events are recycled: a CUDA event costs a driver call to create, and a step records hundreds.
#pragma once

#include "kernels/ops.h"

#include <memory>
#include <vector>

namespace shardscope {

class EventPool {
public:
    explicit EventPool(kernels::Ops& ops) : ops_(ops) {}

    // An event recorded on `stream` now.
    std::unique_ptr<kernels::Event> record(kernels::Stream& stream) {
        std::unique_ptr<kernels::Event> event;
        if (spare_.empty()) {
            event = ops_.createEvent();
        } else {
            event = std::move(spare_.back());
            spare_.pop_back();
        }
        stream.record(*event);
        return event;
    }
    void giveBack(std::unique_ptr<kernels::Event> event) { spare_.push_back(std::move(event)); }

private:
    kernels::Ops& ops_;
    std::vector<std::unique_ptr<kernels::Event>> spare_;
};

} // namespace shardscope
