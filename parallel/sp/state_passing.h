// P2P state passing for recurrent mixers (the Priming paper's Eqs. 14–17, composed associatively): each chunk maps
// the state entering it affinely, S_out = M·S_in + E, with E its final state from a zero start and M its total
// transition; the state entering every chunk is the composition of all earlier chunks' (M, E) pairs applied to the
// sequence's initial state. (M₂, E₂)∘(M₁, E₁) = (M₂M₁, M₂E₁ + E₂) is associative, so the prefix over P ranks runs
// in 1 + ⌈log₂(P−1)⌉ neighbour rounds (Hillis–Steele) instead of the P−1 dependent hops of a serial chain
// (LASP-1, the reference implementation); both are here, the serial chain for comparison.
//
// The backward is the same prefix run the other way: with G_r the gradient of chunk r's outgoing state,
// G_r = M_{r+1}ᵀ G_{r+1} + dS_in_{r+1} (an exclusive scan with transitions Mᵀ from the last chunk), then
// dE_r = G_r, dM_r = G_r S_in_rᵀ (scalar: e^a Σ G⊙S_in), d(initial) = dS_in_0 + M_0ᵀ G_0.
#pragma once
#include <string>

#include "core/autograd/variable.h"
#include "core/sequence_layout.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel {

enum class StatePassing {
  LogDepth,  // Hillis–Steele prefix over the ranks of each chain
  Serial,    // chunk after chunk along the sequence
};
StatePassing parse_state_passing(const std::string& name);  // log-depth, serial
const char* state_passing_name(StatePassing passing);

// The transition of a chunk: [R, H] log of a scalar decay, or [R, H, K, K] acting on the left of S [R, H, K, V].
enum class TransitionKind { ScalarLog, Matrix };
TransitionKind transition_kind(const Tensor& transition, const Tensor& final_from_zero);

// The state entering each of this rank's chunk rows (R = chunks·B, chunk-major), on the tape: gradients flow into
// final_from_zero, transition and initial ([B, H, K, V], null: zeros). Collective over comm, which holds the
// layout's ranks in order.
ag::Var incoming_state(Communicator& comm, SequenceLayout layout, StatePassing passing, const ag::Var& final_from_zero,
                       const ag::Var& transition, const ag::Var& initial);

}  // namespace primer::parallel
