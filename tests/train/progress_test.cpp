// The training loop's terminal output (train/progress.h): plain timestamped lines when not a
// terminal, a live line with ETA on one, evaluation time kept out of the ETA; and through the
// binary under a pseudo-terminal (script(1)).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "cli/cli_util.h"
#include "train/progress.h"

namespace ft {
namespace {
using namespace ft::testing;

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

struct EnvVar {
  EnvVar(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~EnvVar() { unsetenv(name_); }
  const char* name_;
};

TEST(Progress, DurationsReadAsClockTimes) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(59.4), "0:59");
  EXPECT_EQ(format_duration(83), "1:23");
  EXPECT_EQ(format_duration(3600 + 62), "1:01:02");
  EXPECT_EQ(format_duration(-1), "-");
  EXPECT_EQ(format_duration(NAN), "-");
}

TEST(Progress, PlainLinesCarryATimestampAndNoControlCharacters) {
  EnvVar plain("FITTRAIN_PROGRESS", "plain");
  std::FILE* f = std::tmpfile();
  {
    Progress p(0, 10, f);
    EXPECT_FALSE(p.tty());
    p.step_done({1, 10, 0.1, 3.5, 1000});  // nothing printed: no live line in a file
    p.line("step      1/10 | loss 3.5000");
    { ProgressActivity eval(&p, "evaluating at step 1"); }
    { ProgressActivity ck(&p, "writing checkpoint x", false); }
  }
  const std::string out = read_all(f);
  std::fclose(f);
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(^\[\d\d-\d\d \d\d:\d\d:\d\d\] step      1/10 \| loss 3\.5000\n)")))
      << out;
  EXPECT_NE(out.find("] evaluating at step 1 ...\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("writing checkpoint"), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
}

TEST(Progress, ATerminalGetsALiveLineThatLogLinesPrintAbove) {
  EnvVar tty("FITTRAIN_PROGRESS", "tty");
  std::FILE* f = std::tmpfile();
  {
    Progress p(0, 4, f);
    EXPECT_TRUE(p.tty());
    p.step_done({4, 4, 1.0, 2.25, 512000});  // the last step is always drawn
    p.line("step      4/4 | loss 2.2500");
    p.finish();
  }
  const std::string out = read_all(f);
  std::fclose(f);
  // live line: \r, the text, erase to end of line
  EXPECT_NE(out.find("\rstep 4/4 [####################] 100% | epoch 1.00 | loss 2.2500 | 512k tok/s | "),
            std::string::npos) << out;
  // the log line first clears the live line, then the live line comes back below it
  const size_t log = out.find("\r\x1b[Kstep      4/4 | loss 2.2500\n");
  ASSERT_NE(log, std::string::npos) << out;
  EXPECT_NE(out.find("\rstep 4/4 [", log), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');  // finish() leaves the final state on its own line
}

TEST(Progress, EvaluationTimeIsNotCountedInTheEta) {
  EnvVar plain("FITTRAIN_PROGRESS", "plain");
  std::FILE* f = std::tmpfile();
  Progress p(10, 110, f);  // resumed at step 10: the estimate counts this process's steps only
  p.step_done({11, 110, 0, 1, 0});
  {
    ProgressActivity eval(&p, "evaluating");
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  p.step_done({12, 110, 0, 1, 0});
  // Two steps took microseconds; with the 0.4 s evaluation counted they would be >= 0.2 s.
  EXPECT_LT(p.seconds_per_step(), 0.1);
  EXPECT_GE(p.elapsed_seconds(), 0.4);
  EXPECT_NEAR(p.eta_seconds(12), 98 * p.seconds_per_step(), 0.5 * 98 * p.seconds_per_step());
  std::fclose(f);
}

TEST(ProgressE2E, UnderAPseudoTerminalTheRunShowsALiveLineWithEta) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) is not installed";
  const std::string dir = temp_dir("progress_tty");
  // script(1) gives the command a pseudo-terminal; its output is what a terminal would get.
  const CmdResult r = run_command("script -qec '" + std::string(FITTRAIN_BINARY) + " train " + kSmallModel +
                                  " --results-dir " + dir + " --max-steps 30 --log-every 10 --eval-every 15"
                                  " --ckpt-every 0' /dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\rstep 30/30 [####################] 100% | epoch "), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(tok/s \| \d+:\d\d < \d+:\d\d)"))) << r.output;
  EXPECT_NE(r.output.find("step     10/30 | loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" | ETA "), std::string::npos) << r.output;
  // not a terminal: no control characters, every loop line timestamped
  const CmdResult plain = run_fittrain(std::string("train ") + kSmallModel + " --results-dir " +
                                       temp_dir("progress_plain") +
                                       " --max-steps 20 --log-every 10 --eval-every 10 --ckpt-every 0");
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(plain.output.find('\r'), std::string::npos);
  EXPECT_TRUE(std::regex_search(plain.output, std::regex(R"(\] step     10/20 \| loss [0-9.]+ \| lr )"))) << plain.output;
  EXPECT_TRUE(std::regex_search(plain.output, std::regex(R"(\] evaluating at step 10 \.\.\.\n)"))) << plain.output;
}

}  // namespace
}  // namespace ft
