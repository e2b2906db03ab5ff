// A block of GPU memory for tests and tools: allocated, filled from the host and read back,
// with no CUDA type in sight, so callers compile without the CUDA headers. Errors throw
// std::runtime_error with the CUDA runtime's message.
#pragma once

#include <cstddef>

namespace shardscope::cuda {

class DeviceArray {
public:
    explicit DeviceArray(std::size_t bytes);
    ~DeviceArray();
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    void* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }
    void upload(const void* host, std::size_t bytes);
    // Waits for the device's work so far, then copies.
    void download(void* host, std::size_t bytes) const;

private:
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

} // namespace shardscope::cuda
