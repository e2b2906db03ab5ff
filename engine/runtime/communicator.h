// Collectives and point-to-point transfers among a group of ranks: the interface the parallel
// code is written against. MpiCommunicator implements it between CPU processes; an NCCL
// implementation on GPUs takes the same calls. Buffers are device pointers of the backend the
// communicator belongs to (host memory for MPI). Every operation is non-blocking and returns a
// Request; nothing may touch the buffers until the request has been waited on. Operations on
// device buffers are ordered after the compute stream's work (orderAfter), so a collective never
// reads a gradient the backward has enqueued but not yet run.
#pragma once

#include "control_channel.h"
#include "kernels/ops.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace shardscope {

class Request {
public:
    class Pending {
    public:
        virtual ~Pending() = default;
        virtual void wait() = 0;
        virtual bool test() = 0; // true once complete
    };

    Request() = default;
    explicit Request(std::unique_ptr<Pending> p) : pending_(std::move(p)) {}
    Request(Request&&) noexcept = default;
    Request& operator=(Request&&) noexcept = default;
    ~Request(); // waits: a request is never abandoned with its buffers in flight

    void wait();
    bool done(); // completes without blocking when it can
    bool active() const { return pending_ != nullptr; }

private:
    std::unique_ptr<Pending> pending_;
};

void waitAll(std::vector<Request>& requests);

// A point-to-point transfer or a collective as telemetry sees it.
struct CommunicationSpan {
    const char* collective = ""; // "send", "recv", "all_reduce", ...
    const char* axis = "";       // "pp", "dp", ...
    std::size_t bytes = 0;
    int peer = -1;             // the other rank in the axis's group, for send and recv
    double start = 0, end = 0; // posted, seen complete
    bool waited = false;       // this rank blocked on it, from waitStart to end
    double waitStart = 0;
    const char* tensor = "";         // "activation" or "gradient", for pipeline transfers
    int microbatch = -1, chunk = -1; // the op it belongs to (-1: the step as a whole)
};

class CommunicationSink {
public:
    virtual ~CommunicationSink() = default;
    virtual double now() const = 0; // seconds, the clock spans are stamped with
    virtual void communication(const CommunicationSpan& span) = 0;
};

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::string name() const = 0; // "world", "dp", "tp", "pp", "cp"

    // Data are typed device pointers (fp32 or bf16; a float* converts); n counts elements. Sums
    // of bf16 add in fp32 and round each partial sum to bf16.
    // data[n] becomes the elementwise sum over the group, in place; the maximum is fp32 only.
    virtual Request allReduceSum(kernels::Ptr data, std::size_t n) = 0;
    virtual Request allReduceMax(float* data, std::size_t n) = 0;
    // out[size * n] = the n values of every rank, in rank order. In place when in is out + rank
    // * n (this rank's part already in its place), as MPI_IN_PLACE and NCCL allow.
    virtual Request allGather(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) = 0;
    // out[n] = the sum over ranks of in[rank * n .. (rank + 1) * n): rank i keeps chunk i.
    // Parts are always of one size, as NCCL takes them: ZeRO pads its units to fit
    // (parallel/shard_layout.h).
    virtual Request reduceScatterSum(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) = 0;
    // Point to point, matched by posting order: the k-th receive one rank posts from a peer
    // takes the k-th send that peer posted to it (NCCL has no tags; MPI keeps one sender's
    // messages to one receiver in order). The pipeline schedules are checked to post in
    // matching orders (verifyProgram).
    virtual Request send(kernels::ConstPtr data, std::size_t n, int peer) = 0;
    virtual Request receive(kernels::Ptr data, std::size_t n, int peer) = 0;
    virtual void barrier() = 0;
    // Every operation posted from now on starts after the work `compute` had enqueued when it
    // was posted; subgroups made later inherit it. A host library (MPI) waits for that work
    // before it posts; a device library (NCCL) makes its own stream wait for an event instead.
    virtual void orderAfter(kernels::Stream& compute) = 0;
    // A channel for host values among this group's ranks (control_channel.h), apart from the
    // data collectives. Every rank of the group calls it at the same point.
    virtual std::unique_ptr<ControlChannel> controlChannel() = 0;
    // Ends every rank of the job at once with `code` (a hang that cannot be recovered from).
    virtual void abortJob(int code) = 0;

    // A communicator over `ranks` (ranks of this group, ascending, including this rank), for
    // the axis `name`. Every rank of this group calls it at the same point with its own list.
    virtual std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks,
                                                   const std::string& name) = 0;
};

} // namespace shardscope
