#include "clock_sync.h"

#include <limits>

namespace shardscope {

ClockOffset measureClockOffset(ControlChannel& world, const std::function<double()>& clock,
                               int rounds) {
    ClockOffset best;
    if (world.size() == 1)
        return best;
    double message = 0;
    if (world.rank() == 0) {
        // One rank at a time, so each round trip measures only its own path.
        for (int r = 1; r < world.size(); ++r)
            for (int i = 0; i < rounds; ++i) {
                world.receive(&message, 1, r);
                message = clock();
                world.send(&message, 1, r);
            }
        return best;
    }
    best.roundTrip = std::numeric_limits<double>::infinity();
    for (int i = 0; i < rounds; ++i) {
        const double t0 = clock();
        message = t0;
        world.send(&message, 1, 0);
        world.receive(&message, 1, 0);
        const double t2 = clock();
        if (t2 - t0 < best.roundTrip) {
            best.roundTrip = t2 - t0;
            best.offset = message - (t0 + t2) / 2;
        }
    }
    return best;
}

} // namespace shardscope
