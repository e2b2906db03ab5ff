// Puts every rank's telemetry on rank 0's clock, so spans of different ranks can be laid side by
// side (a send on one rank against the receive it satisfies on another). The offset is measured
// at start by round trips, as Cristian's algorithm does: rank r sends its time t0, rank 0 answers
// with its time t1, rank r reads t2 on arrival and takes offset = t1 - (t0 + t2) / 2 from the
// round trip with the least delay, whose half bounds the error.
#pragma once

#include "control_channel.h"

#include <functional>

namespace shardscope {

struct ClockOffset {
    double offset = 0;    // seconds to add to this rank's clock to read rank 0's
    double roundTrip = 0; // of the sample used; the offset is within half of it
};

// Collective over `world`: every rank calls it at the same point with its own clock.
ClockOffset measureClockOffset(ControlChannel& world, const std::function<double()>& clock,
                               int rounds = 8);

} // namespace shardscope
