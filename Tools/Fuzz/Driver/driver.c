// Declarations only (include/ChorusFuzzDriver.h): libFuzzer defines them in
// a fuzzing build.
#include "ChorusFuzzDriver.h"
