#ifndef CHORUS_FUZZ_DRIVER_H
#define CHORUS_FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

// libFuzzer's entry for a program with its own `main` (compiler-rt's
// FuzzerInterface.h): it parses libFuzzer's flags from argv and runs `callback`
// on the inputs it evolves. Defined only in a fuzzing build (Tools/fuzz).
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
