#pragma once
// What a fuzz target asserts beyond "no crash, no sanitizer report": a property that must hold
// for every input. A failed check prints the property and aborts, which libFuzzer reports as a
// crash and saves the input.
#include <cstdio>
#include <cstdlib>

#define RSCHED_FUZZ_CHECK(cond)                                                                    \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond);           \
      std::abort();                                                                                \
    }                                                                                              \
  } while (false)
