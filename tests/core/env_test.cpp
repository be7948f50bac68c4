// env_int_in, the one parser of the integer measurement knobs (FT_BUCKET_MB, FT_GATHER_CHUNKS,
// FT_NCCL_BACKGROUND_CTAS): unset or empty gives the fallback, a number in range is taken, and
// anything else is a UserError naming the variable, the range and the value.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace ft {
namespace {

constexpr const char* kVar = "FT_TEST_ENV_INT_IN";  // used by this test alone

std::string error_for(const char* value) {
  setenv(kVar, value, 1);
  try {
    env_int_in(kVar, 4, 1, 1024);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(EnvIntIn, UnsetOrEmptyGivesTheFallback) {
  unsetenv(kVar);
  EXPECT_EQ(env_int_in(kVar, 4, 1, 1024), 4);
  setenv(kVar, "", 1);
  EXPECT_EQ(env_int_in(kVar, 7, 1, 1024), 7);
  unsetenv(kVar);
}

TEST(EnvIntIn, NumbersInRangeAreTakenBoundsIncluded) {
  for (const auto& [text, value] : {std::pair{"1", 1L}, {"1024", 1024L}, {"16", 16L}, {"0", 0L}}) {
    setenv(kVar, text, 1);
    EXPECT_EQ(env_int_in(kVar, 5, 0, 1024), value) << text;
  }
  unsetenv(kVar);
}

TEST(EnvIntIn, AnythingElseNamesTheVariableTheRangeAndTheValue) {
  for (const char* bad : {"0", "1025", "-3", "abc", "16MB", "8 ", "1e3"}) {
    const std::string msg = error_for(bad);
    EXPECT_EQ(msg, std::string(kVar) + " must be 1..1024, got '" + bad + "'") << bad;
  }
  unsetenv(kVar);
}

}  // namespace
}  // namespace ft
