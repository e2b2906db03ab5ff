// The few host values ranks exchange to agree on something: the stop vote, the step's loss and
// gradient-norm sums, the validation loss, the clock offsets. They travel apart from the data
// collectives, which move device buffers, wait for the compute stream and on GPUs run on NCCL:
// a vote must not queue behind a step's gradients, and a loss summed as a double keeps its
// precision. Every call blocks until the values have arrived.
#pragma once

#include <cstddef>

namespace shardscope {

class ControlChannel {
public:
    virtual ~ControlChannel() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // values[n] become the sum over every rank's, in place.
    virtual void sum(double* values, std::size_t n) = 0;
    virtual void send(const double* values, std::size_t n, int peer) = 0;
    virtual void receive(double* values, std::size_t n, int peer) = 0;

    // The sum over ranks of one value.
    double total(double value) {
        sum(&value, 1);
        return value;
    }
    // True on every rank when it is true on any.
    bool any(bool mine) { return total(mine ? 1.0 : 0.0) > 0.0; }
};

} // namespace shardscope
