// An in-process group for unit tests of the parallel code: `size` threads, each a rank with its
// own communicator. Collectives meet at a barrier and each rank reads the others' buffers, so
// every rank computes on its own data as MPI ranks would, without starting processes. Only the
// blocking collectives the tensor-parallel and ZeRO code use are here, on fp32, and send and
// receive as context parallelism's ring uses them (a send copies into the receiver's mailbox and
// completes at once; a receive completes when its message is there, in the order sent).
#pragma once

#include "fake_communicator.h"

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace shardscope::testing {

class ThreadGroup {
public:
    explicit ThreadGroup(int size) : size_(size), sync_(size), inputs_(std::size_t(size)) {}

    // Runs body(rank, communicator) on `size` threads and joins them; rethrows the first
    // exception a rank threw (a rank that throws must not leave the others at a barrier, so
    // bodies throw only from assertions after their last collective).
    void run(const std::function<void(int rank, Communicator& group)>& body) {
        std::vector<std::thread> threads;
        std::exception_ptr failure;
        std::mutex lock;
        for (int r = 0; r < size_; ++r)
            threads.emplace_back([&, r] {
                Rank communicator(*this, r);
                try {
                    body(r, communicator);
                } catch (...) {
                    const std::lock_guard<std::mutex> guard(lock);
                    if (!failure)
                        failure = std::current_exception();
                }
            });
        for (std::thread& t : threads)
            t.join();
        if (failure)
            std::rethrow_exception(failure);
    }

private:
    class Rank final : public FakeCommunicator {
    public:
        Rank(ThreadGroup& g, int rank) : FakeCommunicator(rank, g.size_), g_(g) {}
        std::string name() const override { return "tp"; }

        Request allReduceSum(kernels::Ptr data, std::size_t n) override {
            return reduce(kernels::asFloats(data), n, [](float a, float b) { return a + b; });
        }
        Request allReduceMax(float* data, std::size_t n) override {
            return reduce(data, n, [](float a, float b) { return std::max(a, b); });
        }
        Request allGather(kernels::ConstPtr typedIn, kernels::Ptr typedOut,
                          std::size_t n) override {
            const float* in = kernels::asFloats(typedIn);
            float* out = kernels::asFloats(typedOut);
            publish(in);
            for (int r = 0; r < size(); ++r)
                if (out + std::size_t(r) * n != g_.inputs_[std::size_t(r)]) // not in place
                    std::copy(g_.inputs_[std::size_t(r)], g_.inputs_[std::size_t(r)] + n,
                              out + std::size_t(r) * n);
            g_.sync_.arrive_and_wait();
            return {};
        }
        Request reduceScatterSum(kernels::ConstPtr typedIn, kernels::Ptr typedOut,
                                 std::size_t n) override {
            const float* in = kernels::asFloats(typedIn);
            float* out = kernels::asFloats(typedOut);
            publish(in);
            const std::size_t begin = std::size_t(rank()) * n;
            for (std::size_t i = 0; i < n; ++i) {
                float sum = 0;
                for (int r = 0; r < size(); ++r)
                    sum += g_.inputs_[std::size_t(r)][begin + i];
                out[i] = sum;
            }
            g_.sync_.arrive_and_wait();
            return {};
        }
        Request send(kernels::ConstPtr typedData, std::size_t n, int peer) override {
            const float* data = kernels::asFloats(typedData);
            const std::lock_guard<std::mutex> guard(g_.mailLock_);
            g_.mail_[{rank(), peer}].emplace_back(data, data + n);
            g_.mailArrived_.notify_all();
            return {};
        }
        Request receive(kernels::Ptr typedData, std::size_t n, int peer) override {
            return Request(
                std::make_unique<Receipt>(g_, peer, rank(), kernels::asFloats(typedData), n));
        }
        void barrier() override { g_.sync_.arrive_and_wait(); }

    private:
        // A receive: takes the oldest message from peer to this rank when waited for.
        class Receipt final : public Request::Pending {
        public:
            Receipt(ThreadGroup& g, int from, int to, float* data, std::size_t n)
                : g_(g), key_(from, to), data_(data), n_(n) {}
            void wait() override {
                std::unique_lock<std::mutex> guard(g_.mailLock_);
                g_.mailArrived_.wait(guard, [&] { return !g_.mail_[key_].empty(); });
                take();
            }
            bool test() override {
                const std::lock_guard<std::mutex> guard(g_.mailLock_);
                if (g_.mail_[key_].empty())
                    return false;
                take();
                return true;
            }

        private:
            void take() {
                std::vector<float>& message = g_.mail_[key_].front();
                if (message.size() != n_)
                    throw std::logic_error("ThreadGroup: a receive of another size than its send");
                std::copy(message.begin(), message.end(), data_);
                g_.mail_[key_].pop_front();
            }
            ThreadGroup& g_;
            std::pair<int, int> key_;
            float* data_;
            std::size_t n_;
        };

        // Every rank's buffers are visible to all once this returns.
        void publish(const float* in) {
            g_.inputs_[std::size_t(rank())] = in;
            g_.sync_.arrive_and_wait();
        }
        template <typename Op> Request reduce(float* data, std::size_t n, Op op) {
            publish(data);
            std::vector<float> result(g_.inputs_[0], g_.inputs_[0] + n);
            for (int r = 1; r < size(); ++r)
                for (std::size_t i = 0; i < n; ++i)
                    result[i] = op(result[i], g_.inputs_[std::size_t(r)][i]);
            g_.sync_.arrive_and_wait(); // everyone has read every input before any is overwritten
            std::copy(result.begin(), result.end(), data);
            return {};
        }
        ThreadGroup& g_;
    };

    int size_;
    std::barrier<> sync_;
    std::vector<const float*> inputs_; // each rank's buffer in the collective under way
    std::mutex mailLock_;
    std::condition_variable mailArrived_;
    std::map<std::pair<int, int>, std::deque<std::vector<float>>> mail_; // (from, to) -> messages
};

} // namespace shardscope::testing
