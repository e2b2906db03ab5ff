#include "host_staged_communicator.h"

#include <utility>

namespace shardscope {

namespace {

std::size_t bytesOf(kernels::DType type, std::size_t n) {
    return n * kernels::sizeOf(type);
}

} // namespace

// Keeps the host copies alive while the inner operation uses them (moving a vector keeps its
// memory where it is), and copies the result back once.
class HostStagedCommunicator::Staging final : public Request::Pending {
public:
    Staging(Request inner, Host input, Host result, void* to, kernels::Ops& device)
        : inner_(std::move(inner)), input_(std::move(input)), host_(std::move(result)), to_(to),
          device_(device) {}
    void wait() override {
        inner_.wait();
        finish();
    }
    bool test() override {
        if (!inner_.done())
            return false;
        finish();
        return true;
    }

private:
    void finish() {
        if (to_ && !host_.empty()) // enqueued on the compute stream: later work sees it
            device_.copyToDevice(to_, host_.data(), host_.size());
        to_ = nullptr;
    }
    Request inner_;
    Host input_, host_;
    void* to_;
    kernels::Ops& device_;
};

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> owned,
                                               kernels::Ops& device)
    : owned_(std::move(owned)), inner_(*owned_), device_(device) {}

HostStagedCommunicator::HostStagedCommunicator(Communicator& inner, kernels::Ops& device)
    : inner_(inner), device_(device) {}

HostStagedCommunicator::Host HostStagedCommunicator::toHost(const void* from, std::size_t bytes) {
    Host host(bytes);
    if (from && bytes > 0)
        device_.copyToHost(host.data(), from, bytes);
    return host;
}

Request HostStagedCommunicator::staged(Request inner, Host input, Host result, void* to) {
    return Request(std::make_unique<Staging>(std::move(inner), std::move(input), std::move(result),
                                             to, device_));
}

Request HostStagedCommunicator::allReduceSum(kernels::Ptr data, std::size_t n) {
    Host host = toHost(data.data, bytesOf(data.type, n));
    Request r = inner_.allReduceSum({host.data(), data.type}, n);
    return staged(std::move(r), {}, std::move(host), data.data);
}

Request HostStagedCommunicator::allReduceMax(float* data, std::size_t n) {
    Host host = toHost(data, n * sizeof(float));
    Request r = inner_.allReduceMax(reinterpret_cast<float*>(host.data()), n);
    return staged(std::move(r), {}, std::move(host), data);
}

Request HostStagedCommunicator::allGather(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) {
    const std::size_t part = bytesOf(out.type, n);
    Host host(part * std::size_t(size()));
    unsigned char* mine = host.data() + part * std::size_t(rank());
    if (part > 0)
        device_.copyToHost(mine, in.data, part);
    // In place on the host too: this rank's part already where the gather puts it.
    Request r = inner_.allGather({mine, in.type}, {host.data(), out.type}, n);
    return staged(std::move(r), {}, std::move(host), out.data);
}

Request HostStagedCommunicator::reduceScatterSum(kernels::ConstPtr in, kernels::Ptr out,
                                                 std::size_t n) {
    Host whole = toHost(in.data, bytesOf(in.type, n) * std::size_t(size()));
    Host mine(bytesOf(out.type, n));
    Request r = inner_.reduceScatterSum({whole.data(), in.type}, {mine.data(), out.type}, n);
    return staged(std::move(r), std::move(whole), std::move(mine), out.data);
}

Request HostStagedCommunicator::send(kernels::ConstPtr data, std::size_t n, int peer) {
    Host host = toHost(data.data, bytesOf(data.type, n));
    Request r = inner_.send({host.data(), data.type}, n, peer);
    return staged(std::move(r), std::move(host), {}, nullptr);
}

Request HostStagedCommunicator::receive(kernels::Ptr data, std::size_t n, int peer) {
    Host host(bytesOf(data.type, n));
    Request r = inner_.receive({host.data(), data.type}, n, peer);
    return staged(std::move(r), {}, std::move(host), data.data);
}

std::unique_ptr<Communicator> HostStagedCommunicator::subgroup(const std::vector<int>& ranks,
                                                               const std::string& name) {
    return std::make_unique<HostStagedCommunicator>(inner_.subgroup(ranks, name), device_);
}

} // namespace shardscope
