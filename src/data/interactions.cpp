// Interactions: building the CSR, the `*.rec` writer and its mapped reader; see interactions.h.
#include "data/interactions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "core/crc32c.h"
#include "core/error.h"
#include "data/mapped_file.h"

namespace ft {
namespace {

struct RecHeader {
  char magic[8];
  uint32_t version, header_bytes, users, items;
  uint64_t interactions, dropped_users, dropped_interactions;
  uint32_t min_interactions, reserved, tables_crc, header_crc;
};
static_assert(sizeof(RecHeader) == kRecHeaderBytes);

constexpr uint64_t pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

// Byte offsets of the tables after the header; `end` is the file size.
struct Layout {
  uint64_t offsets, items, user_ids, item_ids, popularity, end;
  Layout(uint64_t users, uint64_t n_items, uint64_t interactions) {
    offsets = kRecHeaderBytes;
    items = offsets + (users + 1) * 8;
    user_ids = items + pad8(interactions * 4);
    item_ids = user_ids + pad8(users * 4);
    popularity = item_ids + pad8((n_items + 1) * 4);
    end = popularity + pad8((n_items + 1) * 4);
  }
};

void count_popularity(const InteractionsView& v, std::vector<uint32_t>& pop) {
  pop.assign(size_t{v.num_items()} + 1, 0);
  for (uint32_t u = 0; u < v.num_users(); ++u)
    for (uint32_t item : v.train(u)) ++pop[item];
}

}  // namespace

Interactions build_interactions(std::vector<RawInteraction>&& raw, uint32_t min_interactions) {
  Interactions x;
  x.min_interactions = std::max(min_interactions, kMinSplitInteractions);
  x.report.raw_interactions = raw.size();

  // Users: counted, the kept ones numbered in ascending raw id order.
  std::unordered_map<uint32_t, uint32_t> users;
  for (const RawInteraction& r : raw) ++users[r.user];
  x.report.raw_users = users.size();
  for (auto& [id, count] : users) {
    if (count >= x.min_interactions) {
      x.user_ids.push_back(id);
    } else {
      ++x.report.dropped_users;
      x.report.dropped_interactions += count;
    }
  }
  std::sort(x.user_ids.begin(), x.user_ids.end());
  users.clear();
  for (uint32_t u = 0; u < x.user_ids.size(); ++u) users[x.user_ids[u]] = u;
  // remove_if keeps the order of what stays: the input order that breaks time ties.
  raw.erase(std::remove_if(raw.begin(), raw.end(), [&](const RawInteraction& r) { return !users.count(r.user); }),
            raw.end());

  // Items of the kept users, numbered 1..N in ascending raw id order.
  std::unordered_map<uint32_t, uint32_t> items;
  for (const RawInteraction& r : raw) items.emplace(r.item, 0);
  for (const auto& kv : items) x.item_ids.push_back(kv.first);
  std::sort(x.item_ids.begin() + 1, x.item_ids.end());
  for (uint32_t i = 1; i < x.item_ids.size(); ++i) items[x.item_ids[i]] = i;

  // Sort by (dense user, time, input position). With all times inside 2^32 seconds the time
  // and the position pack into one u64 key in the time field and std::sort works in place.
  int64_t tmin = 0, tmax = 0;
  if (!raw.empty()) {
    const auto [lo, hi] = std::minmax_element(raw.begin(), raw.end(),
                                              [](const auto& a, const auto& b) { return a.time < b.time; });
    tmin = lo->time;
    tmax = hi->time;
  }
  const bool packed = static_cast<uint64_t>(tmax - tmin) < (uint64_t{1} << 32) && raw.size() < (uint64_t{1} << 32);
  for (size_t i = 0; i < raw.size(); ++i) {
    RawInteraction& r = raw[i];
    r.user = users[r.user];
    r.item = items[r.item];
    if (packed) r.time = static_cast<int64_t>((static_cast<uint64_t>(r.time - tmin) << 32) | i);
  }
  users = {};
  items = {};
  if (packed) {
    std::sort(raw.begin(), raw.end(), [](const RawInteraction& a, const RawInteraction& b) {
      return a.user != b.user ? a.user < b.user : static_cast<uint64_t>(a.time) < static_cast<uint64_t>(b.time);
    });
  } else {
    std::stable_sort(raw.begin(), raw.end(), [](const RawInteraction& a, const RawInteraction& b) {
      return a.user != b.user ? a.user < b.user : a.time < b.time;
    });
  }

  x.offsets.assign(x.user_ids.size() + 1, 0);
  x.items.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    ++x.offsets[raw[i].user + 1];
    x.items[i] = raw[i].item;
  }
  for (size_t u = 0; u < x.user_ids.size(); ++u) x.offsets[u + 1] += x.offsets[u];
  raw.clear();
  raw.shrink_to_fit();
  count_popularity(x.view(), x.popularity);
  return x;
}

Interactions load_ratings(const std::string& path, RatingsFormat format, uint32_t min_interactions) {
  std::vector<RawInteraction> raw;
  read_ratings(path, format, raw);
  return build_interactions(std::move(raw), min_interactions);
}

void write_rec(const std::string& path, const Interactions& x) {
  const InteractionsView v = x.view();
  FT_CHECK(v.offsets().size() == size_t{v.num_users()} + 1 && v.popularity().size() == v.item_ids().size(),
           "inconsistent interactions");
  RecHeader h{};
  std::memcpy(h.magic, kRecMagic, 8);
  h.version = kRecVersion;
  h.header_bytes = kRecHeaderBytes;
  h.users = v.num_users();
  h.items = v.num_items();
  h.interactions = v.num_interactions();
  h.dropped_users = x.report.dropped_users;
  h.dropped_interactions = x.report.dropped_interactions;
  h.min_interactions = x.min_interactions;
  static const unsigned char zeros[8] = {};
  std::vector<ByteRange> pieces;
  auto table = [&](const void* p, size_t n) {
    pieces.push_back({p, n});
    if (pad8(n) != n) pieces.push_back({zeros, pad8(n) - n});
  };
  table(v.offsets().data(), v.offsets().size_bytes());
  table(v.items().data(), v.items().size_bytes());
  table(v.user_ids().data(), v.user_ids().size_bytes());
  table(v.item_ids().data(), v.item_ids().size_bytes());
  table(v.popularity().data(), v.popularity().size_bytes());
  uint32_t crc = 0;
  for (const ByteRange& p : pieces) crc = crc32c(p.data, p.bytes, crc);
  h.tables_crc = crc;
  h.header_crc = crc32c(&h, 60);
  pieces.insert(pieces.begin(), ByteRange{&h, sizeof h});
  write_file_atomic(path, pieces);
}

RecFile::RecFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FT_USER_CHECK(fd >= 0, path, ": cannot open interactions file: ", std::strerror(errno));
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) ::close(fd);
  FT_USER_CHECK(ok, path, ": not a regular file (an interactions file must be one)");
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (bytes > 0) {
    void* m = map_data_file(fd, bytes);
    const int e = errno;
    ::close(fd);
    FT_USER_CHECK(m != MAP_FAILED, path, ": cannot mmap interactions file: ", std::strerror(e));
    map_ = m;
    map_bytes_ = bytes;
  } else {
    ::close(fd);
  }
  // The checks run inside a try so that a refused file is unmapped (no destructor runs).
  try {
    validate(bytes);
  } catch (...) {
    unmap_data_file(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

void RecFile::validate(uint64_t bytes) {
  const std::string& path = path_;
  auto fail = [&](const std::string& what) {
    throw UserError(path + ": not a valid fittrain interactions file (.rec): " + what);
  };
  if (bytes < kRecHeaderBytes)
    fail(detail::concat("only ", bytes, " bytes, the header alone is ", kRecHeaderBytes, " (truncated?)"));
  const auto* base = static_cast<const unsigned char*>(map_);
  RecHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kRecMagic, 8) != 0) fail("bad magic (expected \"FTREC\")");
  if (h.version != kRecVersion) fail(detail::concat("unsupported version ", h.version, " (expected ", kRecVersion, ")"));
  if (crc32c(&h, 60) != h.header_crc) fail("header CRC mismatch (corrupted header)");
  if (h.header_bytes != kRecHeaderBytes) fail(detail::concat("header size ", h.header_bytes));
  if (h.interactions > (uint64_t{1} << 40)) fail(detail::concat("implausible interaction count ", h.interactions));
  const Layout L(h.users, h.items, h.interactions);
  if (bytes != L.end)
    fail(detail::concat("the header implies ", L.end, " bytes but the file has ", bytes,
                        bytes < L.end ? " (truncated?)" : " (trailing data)"));
  if (crc32c(base + L.offsets, L.end - L.offsets) != h.tables_crc) fail("table CRC mismatch (corrupted data)");

  auto u32s = [&](uint64_t at, uint64_t n) { return std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(base + at), n); };
  const std::span<const uint64_t> offsets(reinterpret_cast<const uint64_t*>(base + L.offsets), size_t{h.users} + 1);
  view_ = InteractionsView(offsets, u32s(L.items, h.interactions), u32s(L.user_ids, h.users),
                           u32s(L.item_ids, uint64_t{h.items} + 1), u32s(L.popularity, uint64_t{h.items} + 1));
  min_interactions_ = h.min_interactions;
  // Contents: a corrupted-but-CRC-valid file can only come from a writer bug, yet the checks
  // are cheap (one pass) and keep every later index in bounds.
  if (h.min_interactions < kMinSplitInteractions) fail(detail::concat("min_interactions ", h.min_interactions, " < 3"));
  if (offsets[0] != 0 || offsets[h.users] != h.interactions) fail("user offsets do not span the items table");
  for (uint32_t u = 0; u < h.users; ++u)
    if (offsets[u + 1] < offsets[u] || offsets[u + 1] - offsets[u] < h.min_interactions)
      fail(detail::concat("user ", u, " has offsets ", offsets[u], "..", offsets[u + 1]));
  for (uint32_t item : view_.items())
    if (item == 0 || item > h.items) fail(detail::concat("item ", item, " outside 1..", h.items));
  std::vector<uint32_t> pop;
  count_popularity(view_, pop);
  if (!std::equal(pop.begin(), pop.end(), view_.popularity().begin())) fail("popularity table differs from a recount");
  report_.raw_interactions = h.interactions + h.dropped_interactions;
  report_.raw_users = h.users + h.dropped_users;
  report_.dropped_users = h.dropped_users;
  report_.dropped_interactions = h.dropped_interactions;
}

RecFile::~RecFile() {
  unmap_data_file(map_, map_bytes_);
}

}  // namespace ft
