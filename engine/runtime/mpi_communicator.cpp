#include "mpi_communicator.h"

#include "kernels/bf16.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mpi.h>
#include <stdexcept>
#include <string>

namespace shardscope {

namespace {

constexpr int kTransferTag = 0;

int count(std::size_t n) {
    if (n > std::size_t(std::numeric_limits<int>::max()))
        throw std::length_error("an MPI transfer of " + std::to_string(n) +
                                " elements exceeds the int count MPI takes");
    return static_cast<int>(n);
}

void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS)
        return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(std::string(what) +
                             " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

// bf16 travels as 16-bit words; its sum is this operation: each pair added in fp32 and rounded.
void bf16Sum(void* in, void* inout, int* len, MPI_Datatype*) {
    const auto* a = static_cast<const std::uint16_t*>(in);
    auto* b = static_cast<std::uint16_t*>(inout);
    for (int i = 0; i < *len; ++i)
        b[i] = kernels::floatToBf16(kernels::bf16ToFloat(a[i]) + kernels::bf16ToFloat(b[i]));
}

MPI_Datatype mpiType(kernels::DType t) {
    return t == kernels::DType::F32 ? MPI_FLOAT : MPI_UINT16_T;
}

// MPI_SUM, or for bf16 the operation above (made once, when MPI is running).
MPI_Op sumOf(kernels::DType t) {
    if (t == kernels::DType::F32)
        return MPI_SUM;
    static const MPI_Op op = [] {
        MPI_Op made = MPI_OP_NULL;
        check(MPI_Op_create(&bf16Sum, 1, &made), "MPI_Op_create");
        return made;
    }();
    return op;
}

// A started MPI operation.
class MpiPending final : public Request::Pending {
public:
    MPI_Request* request() { return &request_; }
    void wait() override { check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait"); }
    bool test() override {
        int flag = 0;
        check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        return flag != 0;
    }

private:
    MPI_Request request_ = MPI_REQUEST_NULL;
};

Request started(MPI_Request r) {
    auto p = std::make_unique<MpiPending>();
    *p->request() = r;
    return Request(std::move(p));
}

// Control values on a duplicate of the group's communicator: MPI matches messages per
// communicator, so they never meet the data transfers.
class MpiControlChannel final : public ControlChannel {
public:
    explicit MpiControlChannel(MPI_Comm group) {
        check(MPI_Comm_dup(group, &comm_), "MPI_Comm_dup");
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
    }
    ~MpiControlChannel() override { MPI_Comm_free(&comm_); }
    MpiControlChannel(const MpiControlChannel&) = delete;
    MpiControlChannel& operator=(const MpiControlChannel&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void sum(double* values, std::size_t n) override {
        check(MPI_Allreduce(MPI_IN_PLACE, values, count(n), MPI_DOUBLE, MPI_SUM, comm_),
              "MPI_Allreduce");
    }
    void send(const double* values, std::size_t n, int peer) override {
        check(MPI_Send(values, count(n), MPI_DOUBLE, peer, 0, comm_), "MPI_Send");
    }
    void receive(double* values, std::size_t n, int peer) override {
        check(MPI_Recv(values, count(n), MPI_DOUBLE, peer, 0, comm_, MPI_STATUS_IGNORE),
              "MPI_Recv");
    }

private:
    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
};

class MpiCommunicator final : public Communicator {
public:
    MpiCommunicator(MPI_Comm comm, std::string name, bool owned)
        : comm_(comm), name_(std::move(name)), owned_(owned) {
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
    }
    ~MpiCommunicator() override {
        if (owned_)
            MPI_Comm_free(&comm_);
    }
    MpiCommunicator(const MpiCommunicator&) = delete;
    MpiCommunicator& operator=(const MpiCommunicator&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string name() const override { return name_; }

    Request allReduceSum(kernels::Ptr data, std::size_t n) override {
        waitForCompute();
        MPI_Request r;
        check(MPI_Iallreduce(MPI_IN_PLACE, data.data, count(n), mpiType(data.type),
                             sumOf(data.type), comm_, &r),
              "MPI_Iallreduce");
        return started(r);
    }
    Request allReduceMax(float* data, std::size_t n) override {
        waitForCompute();
        MPI_Request r;
        check(MPI_Iallreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_MAX, comm_, &r),
              "MPI_Iallreduce");
        return started(r);
    }
    Request allGather(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) override {
        sameType(in.type, out.type);
        waitForCompute();
        MPI_Request r;
        const bool inPlace = in.data == (out + std::size_t(rank_) * n).data;
        check(MPI_Iallgather(inPlace ? MPI_IN_PLACE : in.data, count(n), mpiType(in.type), out.data,
                             count(n), mpiType(out.type), comm_, &r),
              "MPI_Iallgather");
        return started(r);
    }
    Request reduceScatterSum(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) override {
        sameType(in.type, out.type);
        waitForCompute();
        MPI_Request r;
        check(MPI_Ireduce_scatter_block(in.data, out.data, count(n), mpiType(in.type),
                                        sumOf(in.type), comm_, &r),
              "MPI_Ireduce_scatter_block");
        return started(r);
    }
    // One tag for every transfer: MPI matches one sender's messages to one receiver in the
    // order they were posted, which is the order the schedules post them in.
    Request send(kernels::ConstPtr data, std::size_t n, int peer) override {
        waitForCompute();
        MPI_Request r;
        check(MPI_Isend(data.data, count(n), mpiType(data.type), peer, kTransferTag, comm_, &r),
              "MPI_Isend");
        return started(r);
    }
    Request receive(kernels::Ptr data, std::size_t n, int peer) override {
        waitForCompute();
        MPI_Request r;
        check(MPI_Irecv(data.data, count(n), mpiType(data.type), peer, kTransferTag, comm_, &r),
              "MPI_Irecv");
        return started(r);
    }
    void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }
    void orderAfter(kernels::Stream& compute) override { compute_ = &compute; }
    static void sameType(kernels::DType a, kernels::DType b) {
        if (a != b)
            throw std::logic_error("a collective between " + kernels::toString(a) + " and " +
                                   kernels::toString(b) + " buffers");
    }
    std::unique_ptr<ControlChannel> controlChannel() override {
        return std::make_unique<MpiControlChannel>(comm_);
    }
    void abortJob(int code) override { MPI_Abort(comm_, code); }

    std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks,
                                           const std::string& name) override {
        // Colour by the group's first rank: every member computes the same one.
        MPI_Comm sub;
        check(MPI_Comm_split(comm_, ranks.front(), rank_, &sub), "MPI_Comm_split");
        auto group = std::make_unique<MpiCommunicator>(sub, name, true);
        group->compute_ = compute_;
        return group;
    }

private:
    // MPI reads and writes device memory from the host, so the host waits for the compute
    // stream's work first.
    void waitForCompute() const {
        if (compute_)
            compute_->synchronize();
    }

    MPI_Comm comm_;
    std::string name_;
    bool owned_;
    int rank_ = 0, size_ = 1;
    kernels::Stream* compute_ = nullptr;
};

} // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    // Errors come back as codes, which check() turns into exceptions with MPI's text.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
    MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::world() const {
    return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", false);
}

std::string MpiSession::libraryVersion() {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(text, &length);
    std::string line(text, std::size_t(std::max(0, length)));
    line.erase(std::find(line.begin(), line.end(), '\0'), line.end()); // length counts the NUL
    if (const std::size_t nl = line.find_first_of("\r\n"); nl != std::string::npos)
        line.resize(nl);
    return line;
}

bool MpiSession::launchedByMpi() {
    return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
           std::getenv("PMIX_RANK") || std::getenv("SLURM_PROCID");
}

} // namespace shardscope
