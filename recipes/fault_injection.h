// Deliberate faults for the fault-tolerance tests (tests/dist/run_train_fault_test.sh, tests/cpu/test_trainer.cpp):
// with PRIMER_FAULT="<rank>:<point>:<step>:<kill|hang|term|nan>" in the environment, that rank SIGKILLs (kill),
// SIGSTOPs (hang) or SIGTERMs (term: a preemption, which the loop turns into a checkpoint and exit 143) itself when
// it reaches `point` of optimizer step `step` (points: "step", after the step's first micro-batch backward;
// "checkpoint", after writing its checkpoint file and before the ranks agree to commit it). nan (point "step"): the
// loop writes a NaN into the gradient of the last trainable parameter this rank holds, once the step's gradients are
// reduced, as a diverging step would (nan_policy). Without the variable nothing happens.
#pragma once
#include <cstdint>

namespace primer::recipes {

// Acts on a kill, hang or term fault due here; returns true when a nan fault is due here (the caller injects it).
bool fault_here_if_asked(const char* point, int64_t step, int rank);

}  // namespace primer::recipes
