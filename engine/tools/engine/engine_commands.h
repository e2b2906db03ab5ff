// The shardscope-engine command line: `train` runs a training job, `dump` writes one step's
// weights, batch, logits, loss and gradients for checking against another implementation.
#pragma once

#include <iosfwd>

namespace shardscope::engine_cli {

// Exit codes: 0 done (or stopped cleanly), 2 bad input, 3 training failed (non-finite loss),
// 4 an unusable checkpoint.
int runEngine(int argc, char** argv, std::ostream& out, std::ostream& err);

} // namespace shardscope::engine_cli
