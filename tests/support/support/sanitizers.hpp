#pragma once
// RSCHED_TEST_ASAN: defined when this translation unit is built with AddressSanitizer, by GCC
// (__SANITIZE_ADDRESS__) or clang (__has_feature(address_sanitizer)): the tests that bound a
// child's address space or time the CPU then take another way.
#if defined(__SANITIZE_ADDRESS__)
#define RSCHED_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSCHED_TEST_ASAN 1
#endif
#endif
