// A time series that keeps its newest samples whole and thins the older ones: when it reaches
// its capacity, every other sample of the older half goes. So memory stays below the capacity
// however long a run lasts, the recent past is exact, and the distant past keeps its shape.
#pragma once

#include <cstddef>
#include <vector>

namespace shardscope::watch {

template <typename T> class BoundedSeries {
public:
    explicit BoundedSeries(std::size_t capacity = 2048) : capacity_(capacity < 4 ? 4 : capacity) {}

    void push_back(T sample) {
        items_.push_back(std::move(sample));
        if (items_.size() > capacity_)
            thin();
    }
    // Drops samples from the back while `drop` holds (a resumed run reports steps again).
    template <typename Predicate> void dropBackWhile(Predicate drop) {
        while (!items_.empty() && drop(items_.back()))
            items_.pop_back();
    }

    std::size_t size() const { return items_.size(); }
    bool empty() const { return items_.empty(); }
    std::size_t capacity() const { return capacity_; }
    const T& back() const { return items_.back(); }
    const T& operator[](std::size_t i) const { return items_[i]; }
    typename std::vector<T>::const_iterator begin() const { return items_.begin(); }
    typename std::vector<T>::const_iterator end() const { return items_.end(); }

private:
    void thin() {
        const std::size_t older = items_.size() / 2;
        std::size_t kept = 0;
        for (std::size_t i = 0; i < items_.size(); ++i)
            if (i >= older || i % 2 == 0)
                items_[kept++] = std::move(items_[i]);
        items_.erase(items_.begin() + std::ptrdiff_t(kept), items_.end());
    }

    std::size_t capacity_;
    std::vector<T> items_;
};

} // namespace shardscope::watch
