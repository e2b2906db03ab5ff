#include "eager_traffic.h"

namespace shardscope {

EagerTraffic eagerLayerTraffic(const ModelSpec& m, LayerKind kind, const ParallelConfig& p) {
    EagerTraffic total;
    forEachEagerTerm(m, kind, p, [&](const EagerTerm& term) {
        total.forward += term.forward;
        total.backward += term.backward;
    });
    return total;
}

} // namespace shardscope
