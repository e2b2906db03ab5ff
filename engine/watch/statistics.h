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
    const std::size_t n = v.size();
    const auto upper = v.begin() + std::ptrdiff_t(n / 2);
    std::nth_element(v.begin(), upper, v.end());
    if (n % 2)
        return *upper;
    return (*std::max_element(v.begin(), upper) + *upper) / 2; // the largest of the lower half
}

} // namespace shardscope::watch
