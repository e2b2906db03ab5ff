// Plain text tables for the command-line reports.
#pragma once

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <string>
#include <vector>

namespace shardscope::cli {

// A plain text table: columns padded to their widest cell, numbers right-aligned.
class Table {
public:
    explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    void print(std::ostream& out) const {
        std::vector<std::size_t> width;
        for (const auto& r : rows_)
            for (std::size_t i = 0; i < r.size(); ++i) {
                width.resize(std::max(width.size(), r.size()));
                width[i] = std::max(width[i], r[i].size());
            }
        for (std::size_t r = 0; r < rows_.size(); ++r) {
            for (std::size_t i = 0; i < rows_[r].size(); ++i) {
                const bool right = i > 0;
                out << (i ? "  " : "") << (right ? std::right : std::left)
                    << std::setw(int(width[i])) << rows_[r][i];
            }
            out << '\n';
            if (r == 0) {
                std::size_t total = 0;
                for (std::size_t w : width)
                    total += w + 2;
                out << std::string(total - 2, '-') << '\n';
            }
        }
    }

private:
    std::vector<std::vector<std::string>> rows_;
};

} // namespace shardscope::cli
