#pragma once
// blame() and inversions(), and the one-line cause spikes() prints; the window causes they read
// are causes.hpp's.
#include "causes.hpp"

#include <string>
#include <vector>

namespace rsched::query::detail {

// One line naming a likely cause: "hog[4242] 91% of the wait, <idle> 5%; throttled 1.20 s
// (/app); CPU pressure 35%". A culprit process is named comm[pid] (two processes of one name
// are two culprits); pseudo-culprits and rollup culprits (per comm, no pid) by name alone.
std::string cause_text(const std::vector<culprit_sum> &culprits, const pressure_sum &p);

} // namespace rsched::query::detail
