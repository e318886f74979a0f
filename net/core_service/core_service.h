#pragma once

// The training core's side of the local protocol (docs/protocol.md, §13):
// crowdtrain-core serves one channel from its daemon, one request at a time
// ("train", "init", "generate"), until "exit" or until the daemon's end
// closes. It keeps one InnerTrainer across tasks, so AdamW's moments carry
// over as DiLoCo asks, and holds nothing else between requests.
//
// Used on one thread (the core's main).

#include "net/core_link/core_channel.h"

#include <string>

namespace crowdtrain::coreservice {

// A fault a test can make the core commit (CROWDTRAIN_CORE_FAULT, read by
// crowdtrain-core; never set in normal use): "hang_at_step:N" sleeps for
// ever inside step N, "garbage_at_step:N" writes bytes that are not a frame
// instead of step N's report, "crash_at_step:N" aborts the process there
// (step N of each task); "old_protocol" answers hello as a core of the
// protocol before this one. With CROWDTRAIN_CORE_FAULT_ONCE=FILE only the core
// that creates FILE commits a step's fault, so the restarted core trains normally.
struct Fault {
    std::string kind; // "" (none), "hang", "garbage", "crash", "old_protocol"
    uint64_t step = 0;
    std::string onceFile;
    static Fault parse(const char* text, const char* onceFile);
};

// Serves until "exit" (returns 0) or the channel closes (returns 0: the
// daemon went away); 3 when the channel fails otherwise.
int serve(corelink::CoreChannel& channel, const Fault& fault = {});

} // namespace crowdtrain::coreservice
