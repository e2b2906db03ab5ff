// Small statistics over measured values.
#pragma once

#include <algorithm>
#include <vector>

namespace shardscope::watch {

// The middle value (the mean of the two middle ones for an even count); 0 for none. Medians, not
// means, summarise steps and ranks: one step that paid for a checkpoint or a page fault should
// not move a figure.
inline double median(std::vector<double> v) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

} // namespace shardscope::watch
