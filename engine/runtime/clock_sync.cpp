#include "clock_sync.h"

#include <limits>

namespace shardscope {

namespace {

constexpr int kTag = 32700; // apart from the pipeline's tags, which stay below 32767

// A double as two floats (the interface moves floats): the high part and the remainder.
void split(double t, float* out) {
    out[0] = static_cast<float>(t);
    out[1] = static_cast<float>(t - double(out[0]));
}
double join(const float* in) {
    return double(in[0]) + double(in[1]);
}

} // namespace

ClockOffset measureClockOffset(Communicator& world, const std::function<double()>& clock,
                               int rounds) {
    ClockOffset best;
    if (world.size() == 1)
        return best;
    float message[2];
    if (world.rank() == 0) {
        // One rank at a time, so each round trip measures only its own path.
        for (int r = 1; r < world.size(); ++r)
            for (int i = 0; i < rounds; ++i) {
                world.receive(message, 2, r, kTag).wait();
                split(clock(), message);
                world.send(message, 2, r, kTag).wait();
            }
        return best;
    }
    best.roundTrip = std::numeric_limits<double>::infinity();
    for (int i = 0; i < rounds; ++i) {
        const double t0 = clock();
        split(t0, message);
        world.send(message, 2, 0, kTag).wait();
        world.receive(message, 2, 0, kTag).wait();
        const double t2 = clock();
        if (t2 - t0 < best.roundTrip) {
            best.roundTrip = t2 - t0;
            best.offset = join(message) - (t0 + t2) / 2;
        }
    }
    return best;
}

} // namespace shardscope
