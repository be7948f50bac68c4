// The recommender end to end through the CLI (issue 15): `prepare --synthetic movielens`, then
// `train --task rec` learns the synthetic users' next items well beyond the popularity
// baseline (HR@10 and NDCG@10, sampled and full ranking); `test` reports the test items,
// `sample` recommends; the item table on and off train the same losses; bad input is named.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "cli/cli_util.h"

namespace ft {
namespace {
using namespace ft::testing;

const std::string kModel = "--task rec --model gpt2rec --seq-len 20 --n-layer 1 --n-embd 32 ";

std::string prepared(const std::string& d) {
  const std::string data = d + "/ml";
  CmdResult r = run_fittrain("prepare --synthetic movielens --users 1500 --items 300 --out " + data, 120);
  EXPECT_EQ(r.status, 0) << r.output;
  return data;
}

// The last evaluation row of a metrics file.
nlohmann::json last_eval(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  nlohmann::json last;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("val_hr10")) last = j;
  }
  return last;
}

TEST(RecE2E, LearnsTheNextItemBeyondPopularityAndTestsOnTheLastItems) {
  const std::string d = temp_dir("rec_e2e");
  const std::string data = prepared(d);
  CmdResult r = run_fittrain("train " + kModel + "--negatives 8 --data-path " + data +
                                 " --global-batch-size 64 --max-steps 200 --eval-every 100 --lr 1e-2 --warmup-steps 10"
                                 " --log-every 50 --results-dir " + d + "/run --metrics-file " + d + "/m.jsonl",
                             600);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("item table on"), std::string::npos) << r.output;
  const nlohmann::json m = last_eval(d + "/m.jsonl");
  ASSERT_TRUE(m.is_object()) << r.output;
  // measured on this synthetic set: HR@10 0.555 vs 0.353, full 0.353 vs 0.219 (popularity)
  EXPECT_GT(m["val_hr10"].get<double>(), m["val_pop_hr10"].get<double>() + 0.10) << m.dump();
  EXPECT_GT(m["val_ndcg10"].get<double>(), m["val_pop_ndcg10"].get<double>() + 0.05) << m.dump();
  EXPECT_GT(m["val_full_hr10"].get<double>(), m["val_pop_full_hr10"].get<double>() + 0.07) << m.dump();
  EXPECT_GT(m["val_full_ndcg10"].get<double>(), m["val_pop_full_ndcg10"].get<double>() + 0.03) << m.dump();
  // the full ranking is the harder protocol (Krichene & Rendle 2020)
  EXPECT_LT(m["val_full_hr10"].get<double>(), m["val_hr10"].get<double>());

  r = run_fittrain("test --data-path " + data + " --results-dir " + d + "/run", 300);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* w : {"test items (each user's last)", "| hr10 ", "| full_hr10 ", "| pop_full_ndcg10 "})
    EXPECT_NE(r.output.find(w), std::string::npos) << w << "\n" << r.output;
  r = run_fittrain("sample --data-path " + data + " --results-dir " + d + "/run --prompt 7 --prompt 12", 300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("user 7 \\([0-9]+ rated\\): top 10 unseen items:( [0-9]+){10}")))
      << r.output;
  EXPECT_NE(r.output.find("user 12 ("), std::string::npos) << r.output;
  r = run_fittrain("sample --data-path " + data + " --results-dir " + d + "/run --prompt 999999", 300);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--prompt 999999: no user with that id"), std::string::npos) << r.output;
  // --prompts-file's user ids are ranked too (the file was read, but the first 5 users printed).
  std::ofstream(d + "/users.txt") << "12\n7\n";
  r = run_fittrain("sample --data-path " + data + " --results-dir " + d + "/run --prompts-file " + d + "/users.txt", 300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("user 12 ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("user 7 ("), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("user 1 ("), std::string::npos) << r.output;
  // Token generation's flags do not apply to a recommender: refused, not ignored.
  for (const char* flag : {"--temperature 0.5", "--max-new-tokens 9", "--top-k 3"}) {
    r = run_fittrain("sample --data-path " + data + " --results-dir " + d + "/run " + flag, 300);
    EXPECT_EQ(r.status, 2) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(flag).substr(0, std::string(flag).find(' ')) + ": "), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("trained for task rec"), std::string::npos) << r.output;
  }
  // sample ran it as rec anyway; an explicit --task lm (the default's value) was taken as left out
  for (const char* cmd : {"test --task diffusion", "sample --task chat", "sample --task lm", "test --task lm"}) {
    r = run_fittrain(std::string(cmd) + " --data-path " + data + " --results-dir " + d + "/run", 300);
    EXPECT_EQ(r.status, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(cmd).substr(std::string(cmd).find("--task")) + ": "), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("was trained for task rec"), std::string::npos) << r.output;
  }
}

// The losses a run prints, "loss X" of every logged step.
std::vector<std::string> losses(const std::string& out) {
  std::vector<std::string> v;
  std::regex re("step +[0-9]+/[0-9]+ \\| loss ([0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    v.push_back((*it)[1]);
  return v;
}

TEST(RecE2E, ItemTableOnAndOffTrainTheSameLosses) {
  const std::string d = temp_dir("rec_cache");
  const std::string data = prepared(d);
  std::vector<std::string> l[2];
  for (int on = 0; on < 2; ++on) {
    CmdResult r = run_fittrain("train " + kModel + "--negatives 2 --data-path " + data + " --item-cache " +
                                   (on ? "on" : "off") + " --global-batch-size 32 --max-steps 4 --log-every 1" +
                                   " --eval-every 0 --results-dir " + d + "/run" + std::to_string(on),
                               300);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(on ? "item table on" : "item table off"), std::string::npos) << r.output;
    l[on] = losses(r.output);
  }
  ASSERT_EQ(l[0].size(), 4u);
  EXPECT_EQ(l[0], l[1]);
}

TEST(RecE2E, BadInputIsNamed) {
  const std::string d = temp_dir("rec_bad");
  const std::string data = prepared(d);
  auto expect = [&](const std::string& args, const std::string& needle) {
    CmdResult r = run_fittrain(args + " --results-dir " + d + "/r", 120);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  };
  expect("train --task rec --model gpt2rec", "--task rec needs --data-path");
  expect("train --task rec --model gpt2rec --data-path " + d, "the folder has no interactions.rec");
  expect("train --task rec --model tiny --data-path " + data, "is not a recommender");
  expect("train --task lm --model gpt2rec --data-path " + data, "is not a language model");
  expect("train --model tiny --negatives 4", "--negatives applies to the recommender");
  expect("train " + kModel + "--rec-loss ce --item-cache off --data-path " + data, "--item-cache off");
  expect("train " + kModel + "--item-cache sometimes --data-path " + data, "--item-cache must be auto, on or off");
  expect("train " + kModel + "--rec-loss hinge --data-path " + data, "--rec-loss must be bpr or ce");
  // Nothing fits: the smallest budget named is the one with the item table dropped (--item-cache
  // auto drops it first; the message counted the table), and exactly that budget fits.
  CmdResult small = run_fittrain("plan --model gpt2rec --global-batch-size 64 --memory-limit 1MiB --results-dir " + d);
  EXPECT_EQ(small.status, 2) << small.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(small.output, m, std::regex("item table off\\) needs [0-9.]+ MiB \\(([0-9]+) bytes\\)")))
      << small.output;
  CmdResult fits = run_fittrain("plan --model gpt2rec --global-batch-size 64 --memory-limit " + m[1].str() +
                                " --results-dir " + d);
  EXPECT_EQ(fits.status, 0) << fits.output;
  EXPECT_NE(fits.output.find("item table off"), std::string::npos) << fits.output;
  // A catalogue too small for sampled evaluation's 100 unrated items a user is refused before
  // training (it trained until the first evaluation, then stopped).
  ASSERT_EQ(run_fittrain("prepare --synthetic movielens --users 40 --items 100 --out " + d + "/small", 120).status, 0);
  expect("train --task rec --model gpt2rec --data-path " + d + "/small --max-steps 1",
         "leaving fewer than the 100 unrated ones that sampled evaluation ranks the held-out item among");
}

}  // namespace
}  // namespace ft
