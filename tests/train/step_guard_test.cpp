// The step guard's pieces (train/step_guard.h): finding the first non-finite value and naming
// its parameter, judging a step (skip, streak, fp16 loss-scale floor), and the checkpoint
// writer and loader refusing non-finite weights.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/session.h"
#include "train/step_guard.h"

namespace ft {
namespace {

TEST(StepGuard, FirstNonFiniteInEveryDtype) {
  std::vector<float> f(10, 1.5f);
  EXPECT_EQ(first_nonfinite(f.data(), DType::f32, 10), -1);
  f[7] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(first_nonfinite(f.data(), DType::f32, 10), 7);
  f[3] = std::nanf("");
  EXPECT_EQ(first_nonfinite(f.data(), DType::f32, 10), 3);
  // bf16: 1.0 = 0x3f80, max finite 0x7f7f, -inf 0xff80, NaN 0x7fc0
  std::vector<uint16_t> b = {0x3f80, 0x7f7f, 0xff7f, 0x0001};
  EXPECT_EQ(first_nonfinite(b.data(), DType::bf16, 4), -1);
  b.push_back(0xff80);
  EXPECT_EQ(first_nonfinite(b.data(), DType::bf16, 5), 4);
  b[1] = 0x7fc0;
  EXPECT_EQ(first_nonfinite(b.data(), DType::bf16, 5), 1);
  // fp16: max finite 0x7bff, inf 0x7c00, NaN 0x7e00
  std::vector<uint16_t> h = {0x3c00, 0x7bff, 0xfbff};
  EXPECT_EQ(first_nonfinite(h.data(), DType::f16, 3), -1);
  h.push_back(0x7e00);
  EXPECT_EQ(first_nonfinite(h.data(), DType::f16, 4), 3);
}

TEST(StepGuard, NamesTheParameterAndLayer) {
  ParamTable t;
  t.add("wte", {10, 4}, true, false, ParamInit::normal, 0.02f);
  t.add("qkvw", {3, 12, 4}, true, true, ParamInit::normal, 0.02f);  // 3 layers of 48
  t.add("lnfw", {4}, false, false, ParamInit::ones);
  EXPECT_EQ(param_name_at(t, 0), "wte");
  EXPECT_EQ(param_name_at(t, 39), "wte");
  EXPECT_EQ(param_name_at(t, 40), "qkvw (layer 0)");
  EXPECT_EQ(param_name_at(t, 40 + 48 + 47), "qkvw (layer 1)");
  EXPECT_EQ(param_name_at(t, 40 + 2 * 48), "qkvw (layer 2)");
  EXPECT_EQ(param_name_at(t, 40 + 3 * 48), "lnfw");
  EXPECT_EQ(param_name_at(t, 1000), "element 1000");
}

TEST(StepGuard, SkipsNonFiniteStepsAndStopsAfterTheStreak) {
  StepGuard g(3, {});
  TrainState st;
  st.step = 4;
  EXPECT_TRUE(g.judge(5, 2.0, 4.0, nullptr, st).apply);
  st.step = 5;
  StepVerdict v = g.judge(6, 2.0, std::nan(""), nullptr, st);
  EXPECT_FALSE(v.apply);
  EXPECT_TRUE(v.bad);
  EXPECT_NE(v.reason.find("gradient norm (nan)"), std::string::npos) << v.reason;
  EXPECT_EQ(g.streak(), 1);
  EXPECT_EQ(g.first_bad_step(), 6);
  TrainState later = st;
  later.step = 6;
  EXPECT_EQ(g.checkpoint_state(later).step, 5);  // the pre-streak state
  v = g.judge(7, std::numeric_limits<double>::infinity(), 4.0, nullptr, later);
  EXPECT_TRUE(v.bad);
  EXPECT_NE(v.reason.find("loss (inf)"), std::string::npos) << v.reason;
  EXPECT_EQ(g.streak(), 2);
  EXPECT_FALSE(g.should_stop());
  EXPECT_EQ(g.checkpoint_state(later).step, 5);
  // A good step ends the streak; three bad ones in a row stop.
  EXPECT_TRUE(g.judge(8, 2.0, 4.0, nullptr, later).apply);
  EXPECT_EQ(g.streak(), 0);
  EXPECT_EQ(g.checkpoint_state(later).step, 6);
  for (int i = 0; i < 3; ++i) g.judge(9 + i, 2.0, std::numeric_limits<double>::infinity(), nullptr, later);
  EXPECT_TRUE(g.should_stop());
  EXPECT_EQ(g.first_bad_step(), 9);
  EXPECT_THROW(StepGuard(0, {}), UserError);
}

TEST(StepGuard, Fp16OverflowIsTheScalersUntilTheScaleIsAtItsFloor) {
  StepGuard g(2, {});
  DynamicLossScaler sc(4.0, 1000, 1.0);
  TrainState st;
  const double inf = std::numeric_limits<double>::infinity();
  // The scaler backs off as before: skipped, not bad.
  StepVerdict v = g.judge(1, 2.0, inf, &sc, st);
  EXPECT_FALSE(v.apply);
  EXPECT_TRUE(v.scaler_skip);
  EXPECT_FALSE(v.bad);
  EXPECT_EQ(sc.scale(), 2.0);
  v = g.judge(2, 2.0, inf, &sc, st);
  EXPECT_FALSE(v.bad);
  EXPECT_EQ(sc.scale(), 1.0);
  EXPECT_EQ(g.streak(), 0);
  // At the floor it can back off no further: a bad step.
  v = g.judge(3, 2.0, inf, &sc, st);
  EXPECT_FALSE(v.apply);
  EXPECT_TRUE(v.bad);
  EXPECT_TRUE(v.scaler_skip);
  EXPECT_EQ(g.streak(), 1);
  EXPECT_EQ(sc.skipped_steps(), 3);
  // A non-finite loss is bad in any precision and leaves the scaler alone.
  v = g.judge(4, std::nan(""), 4.0, &sc, st);
  EXPECT_TRUE(v.bad);
  EXPECT_FALSE(v.scaler_skip);
  EXPECT_EQ(sc.skipped_steps(), 3);
  EXPECT_TRUE(g.should_stop());
  // Recovery: a finite step is applied and counted as clean.
  v = g.judge(5, 2.0, 4.0, &sc, st);
  EXPECT_TRUE(v.apply);
  EXPECT_EQ(sc.clean_steps(), 1);
  EXPECT_EQ(g.streak(), 0);
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

TEST(StepGuard, CheckpointsWithNonFiniteWeightsAreNeitherWrittenNorLoaded) {
  const std::string dir = "/tmp/fittrain_test_nonfinite_ckpt_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  RunConfig rc;
  rc.device = "cpu";
  rc.n_layer = 2;
  rc.n_head = 2;
  rc.n_embd = 32;
  rc.seq_len = 32;
  rc.global_batch_size = 4;
  Session s(rc, true);
  s.fit();
  s.allocate();
  const size_t n = static_cast<size_t>(s.model().num_params());
  std::vector<float> host(n);
  s.model().init_params(1, host.data());
  s.runtime().load_params_from_host(host.data());
  TrainState st;
  st.step = 3;
  const std::string good = dir + "/good.ftc";
  save_checkpoint(s, good, st, true);
  const std::string before = bytes_of(good);

  // Writer: refuses (internal error naming the section and parameter), the file stays.
  const ParamEntry& qkvw = s.model().param_table().at("qkvw");
  const int64_t poisoned = qkvw.offset + qkvw.count - 1;  // the last layer's
  host[static_cast<size_t>(poisoned)] = std::nanf("");
  s.runtime().load_params_from_host(host.data());
  try {
    save_checkpoint(s, good, st, true);
    FAIL() << "a checkpoint with a NaN parameter was written";
  } catch (const InternalError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("refusing to write checkpoint " + good), std::string::npos) << msg;
    EXPECT_NE(msg.find("qkvw (layer 1)"), std::string::npos) << msg;
  }
  EXPECT_EQ(bytes_of(good), before);
  EXPECT_FALSE(std::filesystem::exists(good + ".tmp"));

  // Loader: a checkpoint whose params are non-finite (written through the writer API, so
  // every CRC is right) is refused naming the file.
  const std::string bad = dir + "/bad.ftc";
  {
    CheckpointReader r(good);
    std::vector<std::string> payload;
    std::vector<CheckpointSection> sections;
    for (const auto& e : r.sections()) {
      payload.emplace_back(e.bytes, '\0');
      r.read(e.name, payload.back().data(), e.bytes);
    }
    size_t i = 0;
    for (const auto& e : r.sections()) {
      if (e.name == "params") {
        float inf = std::numeric_limits<float>::infinity();
        std::memcpy(payload[i].data() + 4 * static_cast<size_t>(poisoned), &inf, 4);
      }
      sections.push_back({e.name, payload[i].data(), e.bytes, e.dtype});
      ++i;
    }
    write_checkpoint(bad, r.meta(), sections);
  }
  CheckpointReader(bad).verify_all();  // valid as a file
  try {
    load_checkpoint(s, bad, true);
    FAIL() << "a checkpoint with an inf parameter was loaded";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    EXPECT_NE(msg.find("non-finite"), std::string::npos) << msg;
    EXPECT_NE(msg.find("qkvw (layer 1)"), std::string::npos) << msg;
  }
  EXPECT_EQ(load_checkpoint(s, good, true).step, 3);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ft
