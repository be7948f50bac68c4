// A communicator standing for one rank of two in unit tests of work split over ranks
// (EvalShard): it records the sums the caller adds over the ranks and hands them back
// unchanged but for others_last, so the caller sees its own part alone. Other collectives
// are not expected.
#pragma once
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace ft::test {

class PartComm final : public Communicator {
 public:
  explicit PartComm(int rank) : rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  std::string describe() const override { return "one part of two (test)"; }
  void all_reduce_sum(Tensor, StreamHandle) override { ADD_FAILURE() << "unexpected tensor sum"; }
  void all_reduce_group(std::span<const Tensor>, StreamHandle, CommLane) override {
    ADD_FAILURE() << "unexpected group";
  }
  void reduce_scatter_group(std::span<const Tensor>, StreamHandle, CommLane) override {
    ADD_FAILURE() << "unexpected scatter";
  }
  void all_gather_group(std::span<const Tensor>, StreamHandle) override { ADD_FAILURE() << "unexpected gather"; }
  void all_gather(Tensor, Tensor, StreamHandle) override { ADD_FAILURE() << "unexpected gather"; }
  void all_reduce_sum(std::span<double> v) override {
    sums.assign(v.begin(), v.end());
    if (!v.empty()) v.back() += others_last;
  }
  int64_t all_reduce_min(int64_t v) override { return v; }
  void broadcast(Tensor, int) override {}
  void barrier() override {}
  std::vector<double> sums;  // the last sums asked for
  double others_last = 0;    // what the other rank adds to the last value (e.g. its failure vote)

 private:
  int rank_;
};

}  // namespace ft::test
