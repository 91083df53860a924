// Deliberate faults for the fault-tolerance tests (tests/dist/run_train_fault_test.sh): with
// PRIMER_FAULT="<rank>:<point>:<step>:<kill|hang|term>" in the environment, that rank SIGKILLs (kill), SIGSTOPs (hang)
// or SIGTERMs (term: a preemption, which the loop turns into a checkpoint and exit 143) itself when it reaches
// `point` of optimizer step `step` (points: "step", after the step's first micro-batch
// backward; "checkpoint", after writing its checkpoint file and before the ranks agree to commit it). Without the
// variable nothing happens.
#pragma once
#include <cstdint>

namespace primer::recipes {

void fault_here_if_asked(const char* point, int64_t step, int rank);

}  // namespace primer::recipes
