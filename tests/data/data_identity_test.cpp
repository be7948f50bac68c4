// What the ranks of a run compare of their data (data/data_identity.h): the count, the fields
// and probes of the samples, and the message naming what differs.
#include "data/data_identity.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ft {
namespace {

// n samples of one i32 field of width 4; sample i holds i, i+1, i+2, i+3 plus `bump` at `at`.
class Counting final : public SampleSource {
 public:
  Counting(uint64_t n, int64_t width = 4) : n_(n), width_(width) {}
  uint64_t num_samples() const override { return n_; }
  std::vector<FieldSpec> fields() const override { return {FieldSpec{"tokens", DType::i32, width_}}; }
  void read(uint64_t idx, std::span<void* const> dst) const override {
    ++reads;
    auto* out = static_cast<int32_t*>(dst[0]);
    for (int64_t k = 0; k < width_; ++k) out[k] = static_cast<int32_t>(idx + k) + (idx == at ? bump : 0);
  }
  uint64_t at = UINT64_MAX;
  int32_t bump = 0;
  mutable uint64_t reads = 0;

 private:
  uint64_t n_;
  int64_t width_;
};

TEST(DataIdentity, OneDatasetAgreesWithItselfAndReadsAtMostTheProbes) {
  Counting a(100000), b(100000);
  const std::string ia = data_identity(a, "--data-path d");
  EXPECT_EQ(a.reads, kDataProbes);  // not the 100000 samples
  EXPECT_EQ(first_data_difference(ia, data_identity(b, "--data-path d")), "");
  Counting small(5);
  (void)data_identity(small, "--data-path d");
  EXPECT_EQ(small.reads, 5u);  // every sample of a set smaller than the probes
}

TEST(DataIdentity, AnotherCountIsNamedWithBothCounts) {
  Counting here(48), rank0(64);
  EXPECT_EQ(first_data_difference(data_identity(here, "--data-path d"), data_identity(rank0, "--data-path d")),
            "--data-path d holds 48 samples (rank 0: 64)");
}

TEST(DataIdentity, AnotherLayoutIsNamed) {
  Counting here(64, 8), rank0(64, 4);
  EXPECT_EQ(first_data_difference(data_identity(here, "--data-path d"), data_identity(rank0, "--data-path d")),
            "--data-path d's samples are tokens i32 x8 (rank 0: tokens i32 x4)");
}

// The first and last samples are always probed: a copy cut short and padded, or one whose
// end was rewritten, differs there.
TEST(DataIdentity, AProbedSampleWhoseBytesDifferIsNamed) {
  for (uint64_t at : {uint64_t{0}, uint64_t{9999}}) {
    Counting here(10000), rank0(10000);
    here.at = at;
    here.bump = 1;
    const std::string apart =
        first_data_difference(data_identity(here, "--data-path d"), data_identity(rank0, "--data-path d"));
    EXPECT_EQ(apart.rfind("--data-path d: sample " + std::to_string(at) + "'s bytes differ from rank 0's (CRC-32C ", 0),
              0u)
        << apart;
  }
}

TEST(DataIdentity, ValidationDataOnOneSideOnlyIsNamed) {
  Counting train(64), val(16);
  const std::string both = data_identity(train, "--data-path d") + data_identity(val, "--val-data-path v");
  const std::string train_only = data_identity(train, "--data-path d");
  EXPECT_EQ(first_data_difference(train_only, both), "--val-data-path v holds no data (rank 0: 16 samples)");
  EXPECT_EQ(first_data_difference(both, train_only), "--val-data-path v holds 16 samples (rank 0: no such data)");
}

}  // namespace
}  // namespace ft
