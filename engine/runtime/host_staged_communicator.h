// A communicator for device memory the host cannot read, over one that moves host memory (MPI):
// each operation copies its input to host memory (copyToHost waits for the compute stream's work,
// so it reads what the stream has computed), runs the host collective on the copy, and copies the
// result back onto the compute stream when it completes, before its request reports done. The
// NCCL path's fallback: ranks that share one GPU, where NCCL refuses to run, still run every
// layout.
#pragma once

#include "communicator.h"

#include <memory>
#include <string>
#include <vector>

namespace shardscope {

class HostStagedCommunicator final : public Communicator {
public:
    // `device` is the backend whose memory the buffers are in; it outlives the communicator.
    HostStagedCommunicator(std::unique_ptr<Communicator> owned, kernels::Ops& device);
    HostStagedCommunicator(Communicator& inner, kernels::Ops& device);

    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    std::string name() const override { return inner_.name(); }
    Request allReduceSum(kernels::Ptr data, std::size_t n) override;
    Request allReduceMax(float* data, std::size_t n) override;
    Request allGather(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) override;
    Request reduceScatterSum(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) override;
    Request send(kernels::ConstPtr data, std::size_t n, int peer) override;
    Request receive(kernels::Ptr data, std::size_t n, int peer) override;
    void barrier() override { inner_.barrier(); }
    // Staging already waits for the compute stream; the inner group is told too, for its own
    // operations on host memory.
    void orderAfter(kernels::Stream& compute) override { inner_.orderAfter(compute); }
    std::unique_ptr<ControlChannel> controlChannel() override { return inner_.controlChannel(); }
    void abortJob(int code) override { inner_.abortJob(code); }
    std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks,
                                           const std::string& name) override;

private:
    class Staging;
    using Host = std::vector<unsigned char>;
    // Host memory for `bytes`, filled from the device at `from` when it is given.
    Host toHost(const void* from, std::size_t bytes);
    // The inner request, keeping `input` alive until it completes, then `result` copied to `to`
    // (when given) on the compute stream.
    Request staged(Request inner, Host input, Host result, void* to);

    std::unique_ptr<Communicator> owned_;
    Communicator& inner_;
    kernels::Ops& device_;
};

} // namespace shardscope
