// Checkpoint format and directory management: round trip, detection of every kind of
// damage (always a UserError naming the file), atomic replacement under injected write
// failures, choosing the newest valid checkpoint, pruning and stale tmp cleanup.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "train/checkpoint_dir.h"

namespace fs = std::filesystem;

namespace ft {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Runs f, expecting a UserError whose message contains every one of `parts`.
template <class F>
void expect_user_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no UserError thrown";
  } catch (const UserError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("ft_ckpt_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    testing::fail_checkpoint_write_after_bytes = -1;
    fs::remove_all(dir_);
  }
  std::string file(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  size_t count_files() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }

  std::string dir_;
};

// A checkpoint with a few small sections, used where the content does not matter.
void write_small(const std::string& path, int64_t step, nlohmann::json extra = {}) {
  std::vector<float> w = {1.f, 2.f, 3.f, float(step)};
  std::vector<uint8_t> b = random_bytes(37, static_cast<uint32_t>(step));
  nlohmann::json meta = {{"step", step}};
  if (extra.is_object()) meta.update(extra);
  std::vector<CheckpointSection> s = {{"w", w.data(), w.size() * sizeof(float), "f32"},
                                      {"b", b.data(), b.size(), "u8"}};
  write_checkpoint(path, meta, s);
}

TEST_F(CheckpointTest, RoundTrip) {
  std::vector<float> params(1000);
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.5f * float(i) - 3.f;
  const std::vector<uint8_t> big = random_bytes(1 << 20, 7);
  const std::vector<uint8_t> odd = random_bytes(13, 8);
  const std::string long_name(64, 'n');
  nlohmann::json meta = {{"step", 1234},
                         {"world_size", 4},
                         {"config", {{"model", "gpt2"}, {"lr", 6e-4}}},
                         {"data_cursor", {{"shard", 3}, {"offset", 987654321012LL}}},
                         {"rng", {{"seed", 42}, {"state", "abcdef"}}}};
  std::vector<CheckpointSection> sections = {
      {"params", params.data(), params.size() * sizeof(float), "f32"},
      {"empty", nullptr, 0, ""},
      {"odd", odd.data(), odd.size(), "u8"},
      {"big", big.data(), big.size(), "u8"},
      {long_name, odd.data(), 5, "bf16"},
  };
  const std::string path = file("rt.ftc");
  write_checkpoint(path, meta, sections);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  CheckpointReader r(path);
  EXPECT_EQ(r.version(), kCheckpointVersion);
  EXPECT_EQ(r.meta(), meta);
  ASSERT_EQ(r.sections().size(), sections.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    const auto& e = r.sections()[i];
    EXPECT_EQ(e.name, sections[i].name);
    EXPECT_EQ(e.dtype, sections[i].dtype);
    EXPECT_EQ(e.bytes, sections[i].bytes);
    EXPECT_EQ(e.offset % 8, 0u) << e.name;
    EXPECT_EQ(r.section_bytes(e.name), sections[i].bytes);
    EXPECT_EQ(e.crc, crc32c(sections[i].data, sections[i].bytes));
  }
  EXPECT_TRUE(r.has("big"));
  EXPECT_FALSE(r.has("nope"));
  EXPECT_EQ(r.section_dtype("params"), "f32");
  r.verify_all();

  std::vector<float> p2(params.size());
  r.read("params", p2.data(), p2.size() * sizeof(float));
  EXPECT_EQ(p2, params);
  std::vector<uint8_t> big2(big.size());
  r.read("big", big2.data(), big2.size());
  EXPECT_EQ(big2, big);
  std::vector<uint8_t> odd2(odd.size());
  r.read("odd", odd2.data(), odd2.size());
  EXPECT_EQ(odd2, odd);
  r.read("empty", nullptr, 0);
  std::vector<uint8_t> ln(5);
  r.read(long_name, ln.data(), 5);
  EXPECT_EQ(0, std::memcmp(ln.data(), odd.data(), 5));

  // Wrong size or name: the model does not match the checkpoint.
  expect_user_error([&] { r.read("params", p2.data(), 8); }, {path, "params", "4000"});
  expect_user_error([&] { r.section_bytes("nope"); }, {path, "nope"});

  // Moving the reader keeps it usable.
  CheckpointReader moved = std::move(r);
  EXPECT_TRUE(moved.is_open());
  moved.verify_all();
}

TEST_F(CheckpointTest, EmptyCheckpointAndOverwrite) {
  const std::string path = file("e.ftc");
  write_checkpoint(path, nlohmann::json::object(), {});
  CheckpointReader r(path);
  EXPECT_TRUE(r.sections().empty());
  EXPECT_EQ(r.meta(), nlohmann::json::object());
  r.verify_all();
  write_small(path, 9);  // replaces the file
  CheckpointReader r2(path);
  EXPECT_EQ(r2.meta()["step"], 9);
  EXPECT_EQ(count_files(), 1u);
}

TEST_F(CheckpointTest, InvalidSectionsAreCallerBugs) {
  uint8_t x = 0;
  std::vector<CheckpointSection> dup = {{"a", &x, 1, "u8"}, {"a", &x, 1, "u8"}};
  EXPECT_THROW(write_checkpoint(file("d.ftc"), {}, dup), InternalError);
  std::vector<CheckpointSection> long_name = {{std::string(65, 'x'), &x, 1, "u8"}};
  EXPECT_THROW(write_checkpoint(file("d.ftc"), {}, long_name), InternalError);
  EXPECT_EQ(count_files(), 0u);
}

// Offsets of interesting bytes in a file written by write_small: header 32 bytes, then meta.
constexpr size_t kVersionOffset = 8;

TEST_F(CheckpointTest, FlippedPayloadByteNamesSection) {
  const std::string path = file("p.ftc");
  write_small(path, 3);
  auto bytes = read_bytes(path);
  CheckpointReader probe(path);
  const auto& b = probe.sections()[1];
  ASSERT_EQ(b.name, "b");
  bytes[b.offset + 10] ^= 0x01;
  write_bytes(path, bytes);

  CheckpointReader r(path);  // open() does not read payloads
  expect_user_error([&] { r.verify_all(); }, {path, "'b'", "corrupt"});
  std::vector<uint8_t> dst(b.bytes);
  expect_user_error([&] { r.read("b", dst.data(), dst.size()); }, {path, "'b'", "corrupt"});
  std::vector<float> w(4);
  r.read("w", w.data(), 16);  // the other section is fine
  EXPECT_EQ(w[3], 3.f);
}

// read_blocks hands a section over in order, block by block (a ZeRO-1 rank keeps only its
// pieces), the blocks together exactly the section, and checks the CRC after the last block.
TEST_F(CheckpointTest, SectionsReadInBlocksAreWholeInOrderAndCrcChecked) {
  const std::vector<uint8_t> big = random_bytes((9 << 20) + 13, 11), small = random_bytes(5, 12);
  const std::string path = file("blocks.ftc");
  const std::vector<CheckpointSection> sections = {{"big", big.data(), big.size(), "u8"},
                                                   {"small", small.data(), small.size(), "u8"}};
  write_checkpoint(path, {{"step", 1}}, sections);
  CheckpointReader r(path);
  for (const auto* want : {&big, &small}) {
    const std::string name = want == &big ? "big" : "small";
    std::vector<uint8_t> got;
    size_t blocks = 0;
    r.read_blocks(name, want->size(), [&](uint64_t offset, const uint8_t* data, size_t n) {
      EXPECT_EQ(offset, got.size()) << name;
      EXPECT_GT(n, 0u);
      got.insert(got.end(), data, data + n);
      ++blocks;
    });
    EXPECT_EQ(got, *want) << name;
    EXPECT_EQ(blocks, want == &big ? 3u : 1u) << "a few MiB a block, not the whole section at once";
  }
  expect_user_error([&] { r.read_blocks("big", 7, [](uint64_t, const uint8_t*, size_t) {}); }, {path, "'big'", "7"});

  auto bytes = read_bytes(path);
  bytes[r.sections()[0].offset + big.size() - 1] ^= 0x40;  // the last byte of the last block
  write_bytes(path, bytes);
  CheckpointReader bad(path);
  size_t seen = 0;
  expect_user_error([&] { bad.read_blocks("big", big.size(), [&](uint64_t, const uint8_t*, size_t n) { seen += n; }); },
                    {path, "'big'", "corrupt"});
  EXPECT_EQ(seen, big.size()) << "every block was handed over before the CRC refused the section";
}

TEST_F(CheckpointTest, FlippedMetaByte) {
  const std::string path = file("m.ftc");
  write_small(path, 3);
  auto bytes = read_bytes(path);
  bytes[32 + 2] ^= 0x20;
  write_bytes(path, bytes);
  expect_user_error([&] { CheckpointReader r(path); }, {path, "metadata"});
}

TEST_F(CheckpointTest, TruncatedFile) {
  const std::string path = file("t.ftc");
  write_small(path, 3);
  const auto bytes = read_bytes(path);
  for (size_t keep : {bytes.size() - 1, bytes.size() - 20, size_t{100}, size_t{40}, size_t{31},
                      size_t{0}}) {
    write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + keep));
    expect_user_error([&] { CheckpointReader r(path); }, {path});
  }
  write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.end() - 1));
  expect_user_error([&] { CheckpointReader r(path); }, {path, "truncated", "'b'"});
}

TEST_F(CheckpointTest, WrongMagic) {
  const std::string path = file("w.ftc");
  write_small(path, 3);
  auto bytes = read_bytes(path);
  bytes[0] = 'X';
  write_bytes(path, bytes);
  expect_user_error([&] { CheckpointReader r(path); }, {path, "not a fittrain checkpoint"});
}

TEST_F(CheckpointTest, NewerVersionRefused) {
  const std::string path = file("v.ftc");
  write_small(path, 3);
  auto bytes = read_bytes(path);
  const uint32_t v = 2;
  std::memcpy(&bytes[kVersionOffset], &v, 4);
  const uint32_t hcrc = crc32c(bytes.data(), 28);  // a well-formed file from a newer writer
  std::memcpy(&bytes[28], &hcrc, 4);
  write_bytes(path, bytes);
  expect_user_error([&] { CheckpointReader r(path); }, {path, "version 2", "newer"});
}

TEST_F(CheckpointTest, TrailingBytesRefused) {
  const std::string path = file("x.ftc");
  write_small(path, 3);
  auto bytes = read_bytes(path);
  bytes.push_back(0);
  write_bytes(path, bytes);
  expect_user_error([&] { CheckpointReader r(path); }, {path, "unexpected bytes"});
}

// Every single flipped bit anywhere in the file is caught by open() or verify_all().
TEST_F(CheckpointTest, EveryByteFlipDetected) {
  const std::string path = file("all.ftc");
  const std::string bad = file("bad.ftc");
  write_small(path, 5, {{"loss", 1.5}, {"name", "abc"}});  // meta of odd length: has padding
  const auto bytes = read_bytes(path);
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto b = bytes;
    b[i] ^= static_cast<uint8_t>(1u << (i % 8));
    write_bytes(bad, b);
    bool detected = false;
    try {
      CheckpointReader r(bad);
      r.verify_all();
    } catch (const UserError& e) {
      detected = std::string(e.what()).find(bad) != std::string::npos;
    }
    EXPECT_TRUE(detected) << "flip at byte " << i << " of " << bytes.size();
  }
}

// A scoped failure-injection setting.
struct FailAfter {
  explicit FailAfter(int64_t n) { testing::fail_checkpoint_write_after_bytes = n; }
  ~FailAfter() { testing::fail_checkpoint_write_after_bytes = -1; }
};

TEST_F(CheckpointTest, FailedWriteLeavesPreviousFileUntouched) {
  const std::string path = file("a.ftc");
  write_small(path, 1);
  const auto before = read_bytes(path);

  const auto big = random_bytes(5 << 20, 1);  // more than one 4 MiB write chunk
  const auto big2 = random_bytes(2 << 20, 2);
  std::vector<CheckpointSection> s = {{"big", big.data(), big.size(), "u8"},
                                      {"big2", big2.data(), big2.size(), "u8"}};
  const nlohmann::json meta = {{"step", 2}};
  // Bytes the writer sends in all: the file plus the table rewritten at the end.
  write_checkpoint(file("probe.ftc"), meta, s);
  const int64_t file_bytes = static_cast<int64_t>(fs::file_size(file("probe.ftc")));
  fs::remove(file("probe.ftc"));
  const int64_t total = file_bytes + 2 * 104;

  for (int64_t limit : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{32}, int64_t{45},
                        int64_t{300}, file_bytes / 2, file_bytes - 1, file_bytes, total - 1}) {
    {
      FailAfter hook(limit);
      expect_user_error([&] { write_checkpoint(path, meta, s); }, {path + ".tmp", "injected"});
    }
    EXPECT_EQ(read_bytes(path), before) << "limit " << limit;
    EXPECT_FALSE(fs::exists(path + ".tmp")) << "limit " << limit;
    EXPECT_EQ(count_files(), 1u) << "limit " << limit;
  }
  {
    FailAfter hook(total);  // exactly enough: succeeds
    write_checkpoint(path, meta, s);
  }
  CheckpointReader r(path);
  r.verify_all();
  EXPECT_EQ(r.meta()["step"], 2);

  // A failure with no previous file leaves nothing behind.
  const std::string fresh = file("fresh.ftc");
  {
    FailAfter hook(100);
    EXPECT_THROW(write_checkpoint(fresh, meta, s), UserError);
  }
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_FALSE(fs::exists(fresh + ".tmp"));
}

// Sections whose payload is streamed while the file is written (a device's or several ranks'
// state passed through one small host block): each stream runs once, in table order, after
// the previous section is written, and may pass its bytes in blocks of any size through one
// buffer it overwrites. A stream that passes too few or too many bytes is a bug (InternalError);
// one that throws ends the write with the old file untouched.
TEST_F(CheckpointTest, StreamedSectionsPassThroughOneBlockInOrder) {
  const auto a = random_bytes(5 << 20, 3), b = random_bytes(3 << 20, 4), c = random_bytes(11, 5);
  const std::vector<const std::vector<uint8_t>*> payloads = {&a, &b, &c};
  std::vector<uint8_t> block(1000003);  // blocks of an odd size, reused by every section
  std::vector<size_t> calls;
  auto through_block = [&](size_t i) {
    return [&, i](const CheckpointSink& out) {
      calls.push_back(i);
      const std::vector<uint8_t>& p = *payloads[i];
      for (size_t done = 0; done < p.size();) {
        const size_t n = std::min(block.size(), p.size() - done);
        std::memcpy(block.data(), p.data() + done, n);
        out(block.data(), n);
        std::fill(block.begin(), block.end(), uint8_t{0xAB});  // valid only during the call
        done += n;
      }
    };
  };
  const std::vector<uint8_t> direct = random_bytes(100, 6);  // a section with its own memory between them
  std::vector<CheckpointSection> s = {{"a", nullptr, a.size(), "u8", through_block(0)},
                                      {"direct", direct.data(), direct.size(), "u8"},
                                      {"b", nullptr, b.size(), "u8", through_block(1)},
                                      {"c", nullptr, c.size(), "u8", through_block(2)}};
  const std::string path = file("p.ftc");
  write_checkpoint(path, {{"step", 7}}, s);
  EXPECT_EQ(calls, (std::vector<size_t>{0, 1, 2}));
  {
    CheckpointReader r(path);
    r.verify_all();
    for (auto [name, want] : {std::pair{"a", &a}, {"direct", &direct}, {"b", &b}, {"c", &c}}) {
      std::vector<uint8_t> got(want->size());
      r.read(name, got.data(), got.size());
      EXPECT_EQ(got, *want) << name;
    }
  }

  const auto before = read_bytes(path);
  s[2].stream = [&](const CheckpointSink& out) {
    out(b.data(), 4096);
    throw UserError("gathering 'b' failed");
  };
  expect_user_error([&] { write_checkpoint(path, {{"step", 8}}, s); }, {"gathering 'b' failed"});
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  s[2].stream = [&](const CheckpointSink& out) { out(b.data(), b.size() - 1); };  // one byte short
  EXPECT_THROW(write_checkpoint(path, {{"step", 9}}, s), InternalError);
  s[2].stream = [&](const CheckpointSink& out) {
    out(b.data(), b.size());
    out(b.data(), 1);  // one byte over
  };
  EXPECT_THROW(write_checkpoint(path, {{"step", 9}}, s), InternalError);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(CheckpointTest, WriteIntoMissingDirectoryIsUserError) {
  const std::string path = file("no/such/dir/c.ftc");
  expect_user_error([&] { write_small(path, 1); }, {path + ".tmp"});
}

// ---- directory management --------------------------------------------------------------------

TEST_F(CheckpointTest, NamesAndListing) {
  EXPECT_EQ(checkpoint_dir("/r"), "/r/checkpoints");
  EXPECT_EQ(checkpoint_path("/r/checkpoints", 42), "/r/checkpoints/ckpt_step_00000042.ftc");
  EXPECT_EQ(checkpoint_path("d", 123456789), "d/ckpt_step_123456789.ftc");
  for (int64_t s : {100, 5, 123456789, 20}) write_small(checkpoint_path(dir_, s), s);
  write_bytes(file("notes.txt"), {1, 2});
  write_bytes(file("ckpt_step_abc.ftc"), {1});
  write_bytes(file("ckpt_step_00000007.ftc.tmp"), {1});
  fs::create_directory(file("ckpt_step_00000008.ftc"));
  const auto list = list_checkpoints(dir_);
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list[0].step, 5);
  EXPECT_EQ(list[1].step, 20);
  EXPECT_EQ(list[2].step, 100);
  EXPECT_EQ(list[3].step, 123456789);
  EXPECT_EQ(list[3].path, checkpoint_path(dir_, 123456789));
  EXPECT_TRUE(list_checkpoints(file("missing")).empty());
}

TEST_F(CheckpointTest, LatestValidSkipsCorruptNewest) {
  for (int64_t s : {1, 2, 3}) write_small(checkpoint_path(dir_, s), s);
  std::vector<std::string> warnings;
  auto latest = latest_valid_checkpoint(dir_, &warnings);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 3);
  EXPECT_TRUE(warnings.empty());

  // Newest: a flipped payload byte (only verify_all can see it).
  const std::string p3 = checkpoint_path(dir_, 3);
  auto b3 = read_bytes(p3);
  b3[b3.size() - 1] ^= 0xFF;
  write_bytes(p3, b3);
  latest = latest_valid_checkpoint(dir_, &warnings);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 2);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(p3), std::string::npos) << warnings[0];

  // Next: truncated, as by a crash on a filesystem without the rename guarantee.
  const std::string p2 = checkpoint_path(dir_, 2);
  auto b2 = read_bytes(p2);
  b2.resize(b2.size() / 2);
  write_bytes(p2, b2);
  warnings.clear();
  latest = latest_valid_checkpoint(dir_, &warnings);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 1);
  EXPECT_EQ(warnings.size(), 2u);

  write_bytes(checkpoint_path(dir_, 1), {});
  EXPECT_FALSE(latest_valid_checkpoint(dir_));
  EXPECT_FALSE(latest_valid_checkpoint(file("missing")));
}

TEST_F(CheckpointTest, PruneKeepsLastK) {
  for (int64_t s = 1; s <= 5; ++s) write_small(checkpoint_path(dir_, s * 10), s * 10);
  EXPECT_TRUE(prune_checkpoints(dir_, 0).empty());
  EXPECT_TRUE(prune_checkpoints(dir_, -1).empty());
  EXPECT_TRUE(prune_checkpoints(dir_, 5).empty());
  const auto deleted = prune_checkpoints(dir_, 2);
  EXPECT_EQ(deleted, (std::vector<std::string>{checkpoint_path(dir_, 10), checkpoint_path(dir_, 20),
                                               checkpoint_path(dir_, 30)}));
  const auto left = list_checkpoints(dir_);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].step, 40);
  EXPECT_EQ(left[1].step, 50);
  prune_checkpoints(dir_, 1);
  ASSERT_EQ(list_checkpoints(dir_).size(), 1u);
  EXPECT_EQ(list_checkpoints(dir_)[0].step, 50);
}

TEST_F(CheckpointTest, CleanStaleTmp) {
  write_small(checkpoint_path(dir_, 1), 1);
  {
    FailAfter hook(50);  // a crash mid-write: leave a tmp behind by hand below
    EXPECT_THROW(write_small(checkpoint_path(dir_, 2), 2), UserError);
  }
  write_bytes(checkpoint_path(dir_, 2) + ".tmp", {1, 2, 3});
  write_bytes(file("other.tmp"), {1});
  const auto removed = clean_stale_tmp(dir_);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 2) + ".tmp"));
  EXPECT_FALSE(fs::exists(file("other.tmp")));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_, 1)));
  EXPECT_TRUE(clean_stale_tmp(dir_).empty());
  EXPECT_TRUE(clean_stale_tmp(file("missing")).empty());
}

TEST_F(CheckpointTest, PruneBestK) {
  const double losses[] = {5, 1, 3, 0.5, 4, 9};  // steps 1..6; newest (6) is the worst
  for (int s = 1; s <= 6; ++s)
    write_small(checkpoint_path(dir_, s), s, {{"val_loss", losses[s - 1]},
                                               {"eval", {{"loss", losses[s - 1]}}}});
  write_small(checkpoint_path(dir_, 0), 0, {{"val_loss", "n/a"}});  // not a number: ranks last, named
  std::vector<std::string> warnings;
  EXPECT_TRUE(prune_checkpoints_best(dir_, 0, "val_loss").empty());
  const auto deleted = prune_checkpoints_best(dir_, 2, "val_loss", &warnings);
  EXPECT_EQ(deleted.size(), 4u);
  std::vector<int64_t> kept;
  for (const auto& f : list_checkpoints(dir_)) kept.push_back(f.step);
  EXPECT_EQ(kept, (std::vector<int64_t>{2, 4, 6}));  // best two plus the newest
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(checkpoint_path(dir_, 0)), std::string::npos);

  // JSON pointer into nested metadata; keep 1 -> best (4) plus newest (6).
  const auto d2 = prune_checkpoints_best(dir_, 1, "/eval/loss");
  EXPECT_EQ(d2, std::vector<std::string>{checkpoint_path(dir_, 2)});
  EXPECT_EQ(list_checkpoints(dir_).size(), 2u);
}

// --keep-best K beside --keep-checkpoints N keeps both: the best K and the newest N (0: all).
// It kept the best K and the newest only, whatever --keep-checkpoints said.
TEST_F(CheckpointTest, KeepBestKeepsTheNewestOfKeepCheckpointsToo) {
  const double losses[] = {5, 1, 3, 0.5, 4, 9};  // steps 1..6
  for (int s = 1; s <= 6; ++s) write_small(checkpoint_path(dir_, s), s, {{"val_loss", losses[s - 1]}});
  auto steps = [&] {
    std::vector<int64_t> v;
    for (const auto& f : list_checkpoints(dir_)) v.push_back(f.step);
    return v;
  };
  EXPECT_TRUE(prune_checkpoints_best(dir_, 1, "val_loss", nullptr, {}, 6, 0).empty());  // 0: all kept
  EXPECT_EQ(steps(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  prune_checkpoints_best(dir_, 1, "val_loss", nullptr, {}, 6, 3);
  EXPECT_EQ(steps(), (std::vector<int64_t>{4, 5, 6}));  // the best (4) is among the newest 3
  write_small(checkpoint_path(dir_, 7), 7, {{"val_loss", 7.0}});
  write_small(checkpoint_path(dir_, 8), 8, {{"val_loss", 8.0}});
  prune_checkpoints_best(dir_, 1, "val_loss", nullptr, {}, 8, 2);
  EXPECT_EQ(steps(), (std::vector<int64_t>{4, 7, 8}));  // the best and the newest 2
}

// The checkpoint just written is always kept, and later steps (a damaged file that --resume
// auto skipped, so the run went on from an earlier one) are neither counted nor deleted. A
// damaged later file counted as "the newest" and as the best, and each new checkpoint was
// deleted as soon as it was written; keep-last deleted the new one as one of the oldest.
TEST_F(CheckpointTest, PruningKeepsTheCheckpointJustWrittenAndLeavesLaterStepsAlone) {
  write_small(checkpoint_path(dir_, 100), 100, {{"val_loss", 2.0}});
  write_small(checkpoint_path(dir_, 500), 500, {{"val_loss", 1.5}});  // the later, skipped part
  write_small(checkpoint_path(dir_, 110), 110);  // just written, not evaluated: no val_loss
  auto steps = [&] {
    std::vector<int64_t> v;
    for (const auto& f : list_checkpoints(dir_)) v.push_back(f.step);
    return v;
  };
  EXPECT_EQ(prune_checkpoints_best(dir_, 1, "val_loss", nullptr, {}, 110),
            std::vector<std::string>{});  // 100 the best, 110 the newest
  EXPECT_EQ(steps(), (std::vector<int64_t>{100, 110, 500}));
  write_small(checkpoint_path(dir_, 120), 120, {{"val_loss", 1.0}});
  EXPECT_EQ(prune_checkpoints_best(dir_, 1, "val_loss", nullptr, {}, 120),
            (std::vector<std::string>{checkpoint_path(dir_, 100), checkpoint_path(dir_, 110)}));  // rank order
  EXPECT_EQ(steps(), (std::vector<int64_t>{120, 500}));
  write_small(checkpoint_path(dir_, 130), 130);
  EXPECT_EQ(prune_checkpoints(dir_, 1, nullptr, {}, 130), std::vector<std::string>{checkpoint_path(dir_, 120)});
  EXPECT_EQ(steps(), (std::vector<int64_t>{130, 500}));
}

}  // namespace
}  // namespace ft
