// --devices: which GPUs a run uses (one worker process each).
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/spawn.h"

namespace ft {
namespace {

TEST(Devices, AutoCountAndList) {
  EXPECT_EQ(parse_devices("auto", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_devices("2", 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_devices("3,1", 4), (std::vector<int>{3, 1}));
  EXPECT_EQ(parse_devices("auto", 1), (std::vector<int>{0}));
}

TEST(Devices, BadSpecsNameTheFlag) {
  for (const char* bad : {"0", "5", "x", "1,1", "0,9", "-1", "1,", ""}) {
    try {
      parse_devices(bad, 4);
      ADD_FAILURE() << "accepted --devices '" << bad << "'";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--devices"), std::string::npos) << e.what();
    }
  }
}

TEST(Devices, CpuRunsAreNotSpawnedAndSayWhoStartsCpuRanks) {
  RunConfig rc;
  rc.device = "cpu";
  EXPECT_FALSE(launch_if_several_gpus(rc, {"train"}).has_value());
  rc.devices = "2";
  try {
    launch_if_several_gpus(rc, {"train"});
    ADD_FAILURE() << "--device cpu --devices 2 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun"), std::string::npos) << e.what();
  }
  // A list no machine takes is named for what is wrong with it, not sent to mpirun.
  for (const auto& [bad, says] : {std::pair{"x", "a list of device numbers like 0,2; got 'x'"},
                                  std::pair{"0,0", "device 0 is listed twice"}, std::pair{"1,", "ends with a device"},
                                  std::pair{"0", "at least one device"},
                                  // No machine's count stands in for the CPU's (it built a list this long).
                                  std::pair{"2000000000", "--devices 2000000000: fittrain starts one process per GPU"}}) {
    rc.devices = bad;
    try {
      launch_if_several_gpus(rc, {"train"});
      ADD_FAILURE() << "--device cpu --devices " << bad << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("2147483647"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ft
