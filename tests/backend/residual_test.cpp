// Residual add: values, in-place aliasing, shape check.
#include "backend/cpu/residual.h"

#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(Residual, AddsAndAllowsInPlace) {
  Harness h;
  std::vector<float> a = {1, 2, 3, 4}, b = {10, 20, 30, 40}, out(4);
  h->residual_forward(tf(out, {2, 2}), tf(a, {2, 2}), tf(b, {2, 2}));
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33, 44}));
  h->residual_forward(tf(a, {2, 2}), tf(a, {2, 2}), tf(b, {2, 2}));
  EXPECT_EQ(a, out);
}

TEST(Residual, RejectsMismatchedSizes) {
  Harness h;
  std::vector<float> a(4), b(3), out(4);
  EXPECT_THROW(h->residual_forward(tf(out, {4}), tf(a, {4}), tf(b, {3})), InternalError);
}

}  // namespace
}  // namespace ft::test
