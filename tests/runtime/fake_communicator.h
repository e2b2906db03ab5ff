// A communicator for unit tests: replica `rank` of `size`, every operation a no-op that completes
// at once. Tests override the operations they script.
#pragma once

#include "runtime/communicator.h"

namespace shardscope::testing {

class FakeCommunicator : public Communicator {
public:
    FakeCommunicator(int rank, int size) : rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string name() const override { return "dp"; }
    Request allReduceSum(kernels::Ptr, std::size_t) override { return {}; }
    Request allReduceMax(float*, std::size_t) override { return {}; }
    Request allGather(kernels::ConstPtr, kernels::Ptr, std::size_t) override { return {}; }
    Request reduceScatterSum(kernels::ConstPtr, kernels::Ptr, std::size_t) override { return {}; }
    Request send(kernels::ConstPtr, std::size_t, int) override { return {}; }
    Request receive(kernels::Ptr, std::size_t, int) override { return {}; }
    void barrier() override {}
    void orderAfter(kernels::Stream&) override {}
    std::unique_ptr<ControlChannel> controlChannel() override { return nullptr; }
    void abortJob(int) override {}
    std::unique_ptr<Communicator> subgroup(const std::vector<int>&, const std::string&) override {
        return nullptr;
    }

private:
    int rank_, size_;
};

} // namespace shardscope::testing
