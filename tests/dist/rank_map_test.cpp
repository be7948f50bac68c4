// The placement line's map (dist/rank_map.h): every rank under its machine, machines in the
// order of their first rank.
#include "dist/rank_map.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace ft {
namespace {

TEST(RankMap, RanksAreListedUnderTheirMachineInRankOrder) {
  const std::vector<std::string> entries = {"a\tcuda:0\t11", "a\tcuda:1\t12", "b\tcuda:0\t7", "b\tcuda:1\t8"};
  EXPECT_EQ(format_rank_map(entries, "  "),
            "a: rank 0 cuda:0 (pid 11), rank 1 cuda:1 (pid 12)\n  b: rank 2 cuda:0 (pid 7), rank 3 cuda:1 (pid 8)");
  // A launcher that interleaves machines (mpirun --map-by node): each rank keeps its number.
  EXPECT_EQ(format_rank_map({"a\tcpu\t1", "b\tcpu\t2", "a\tcpu\t3"}, ""),
            "a: rank 0 cpu (pid 1), rank 2 cpu (pid 3)\nb: rank 1 cpu (pid 2)");
}

TEST(RankMap, ThisProcessNamesItsMachineDeviceAndPid) {
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(rank_entry("cuda:3"), std::string(host) + "\tcuda:3\t" + std::to_string(::getpid()));
  EXPECT_EQ(format_rank_map({rank_entry("cpu")}, ""),
            std::string(host) + ": rank 0 cpu (pid " + std::to_string(::getpid()) + ")");
}

}  // namespace
}  // namespace ft
