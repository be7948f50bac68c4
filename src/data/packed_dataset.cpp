// Packed prompt/response shards: writer, mapped reader, PackedDataset; see packed_dataset.h.
#include "data/packed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/mapped_file.h"
#include "data/token_shard.h"

namespace ft {
namespace fs = std::filesystem;

LossOn parse_loss_on(const std::string& s) {
  if (s == "response") return LossOn::kResponse;
  if (s == "all") return LossOn::kAll;
  throw UserError(detail::concat("--loss-on: '", s, "' is neither response nor all"));
}

const char* loss_on_name(LossOn l) { return l == LossOn::kAll ? "all" : "response"; }

namespace {

// The header's fields at their offsets (little-endian hosts only, as the token shards).
struct Header {
  char magic[8];
  uint32_t version, header_bytes, seq_len, token_bytes, loss_on, end_of_text;
  uint64_t rows, samples, tokens;
  uint32_t tables_crc, header_crc;
};
static_assert(sizeof(Header) == kPairsHeaderBytes, "the header is 64 bytes");
static_assert(offsetof(Header, header_crc) == 60, "the header CRC covers the first 60 bytes");

uint64_t pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const auto* c = static_cast<const unsigned char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    FT_USER_CHECK(w > 0, path, ": cannot write packed shard: ", std::strerror(errno));
    c += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

// ---- writer ----

PackedShardWriter::PackedShardWriter(std::string path, uint32_t seq_len, uint32_t vocab_size, uint32_t end_of_text,
                                     LossOn loss_on)
    : path_(std::move(path)),
      tmp_(path_ + ".tmp"),
      seq_len_(seq_len),
      token_bytes_(vocab_size <= 65536 ? 2 : 4),
      end_of_text_(end_of_text),
      loss_on_(loss_on) {
  FT_CHECK(seq_len_ > 0 && seq_len_ < kPairsTruncatedBit, "T=", seq_len_);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FT_USER_CHECK(fd_ >= 0, tmp_, ": cannot create packed shard: ", std::strerror(errno));
  buf_.reserve(1 << 20);
  buf_.resize(kPairsHeaderBytes, 0);  // the header is written last, at offset 0
}

PackedShardWriter::~PackedShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void PackedShardWriter::drain() {
  write_all(fd_, buf_.data(), buf_.size(), tmp_);
  buf_.clear();
}

void PackedShardWriter::put(const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  buf_.insert(buf_.end(), c, c + n);
  if (buf_.size() >= (1u << 20)) drain();
}

void PackedShardWriter::add_row(std::span<const PackedSample> samples) {
  FT_CHECK(fd_ >= 0 && !samples.empty(), "add_row after finish or with no samples");
  uint64_t positions = 0, loss = 0, toks = 0;
  for (const PackedSample& s : samples) {
    const auto n = static_cast<uint32_t>(s.tokens.size());
    FT_CHECK(n >= 2 && s.prompt_len <= n, "sample of ", n, " tokens, prompt ", s.prompt_len);
    positions += n - 1;
    toks += n;
    loss += sample_loss_tokens(n, s.prompt_len, loss_on_);
    if (token_bytes_ == 2) {
      uint16_t narrow[256];
      for (size_t i = 0; i < n; i += 256) {
        const size_t m = std::min<size_t>(256, n - i);
        for (size_t j = 0; j < m; ++j) narrow[j] = static_cast<uint16_t>(s.tokens[i + j]);
        put(narrow, m * 2);
      }
    } else {
      put(s.tokens.data(), size_t{n} * 4);
    }
    sample_table_.push_back(n);
    sample_table_.push_back(s.prompt_len | (s.truncated ? kPairsTruncatedBit : 0));
  }
  FT_CHECK(positions <= seq_len_, "row of ", positions, " positions, T=", seq_len_);
  tokens_ += toks;
  row_tokens_.push_back(tokens_);
  row_samples_.push_back(this->samples());
  row_loss_.push_back(static_cast<uint32_t>(loss));
}

void PackedShardWriter::finish() {
  FT_CHECK(fd_ >= 0, "finish twice");
  const uint64_t tok_bytes = tokens_ * token_bytes_;
  buf_.resize(buf_.size() + (pad8(tok_bytes) - tok_bytes), 0);
  uint32_t crc = 0;
  auto table = [&](const void* p, size_t n) {
    crc = crc32c(p, n, crc);
    put(p, n);
  };
  table(sample_table_.data(), sample_table_.size() * 4);
  table(row_tokens_.data(), row_tokens_.size() * 8);
  table(row_samples_.data(), row_samples_.size() * 8);
  table(row_loss_.data(), row_loss_.size() * 4);
  drain();
  Header h{};
  std::memcpy(h.magic, kPairsMagic, 8);
  h.version = kPairsVersion;
  h.header_bytes = kPairsHeaderBytes;
  h.seq_len = seq_len_;
  h.token_bytes = token_bytes_;
  h.loss_on = static_cast<uint32_t>(loss_on_);
  h.end_of_text = end_of_text_;
  h.rows = rows();
  h.samples = samples();
  h.tokens = tokens_;
  h.tables_crc = crc;
  h.header_crc = crc32c(&h, 60);
  FT_USER_CHECK(::pwrite(fd_, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h), tmp_,
                ": cannot write packed shard header: ", std::strerror(errno));
  FT_USER_CHECK(::fsync(fd_) == 0, tmp_, ": fsync failed: ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  FT_USER_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, path_, ": cannot rename ", tmp_, " into place: ",
                std::strerror(errno));
  std::string dir = fs::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

// ---- mapped shard ----

PackedShard::PackedShard(const std::string& path) : path_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    FT_USER_CHECK(S_ISREG(st.st_mode), path, ": is ", file_kind(st.st_mode), ", not a packed .pairs shard");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FT_USER_CHECK(fd >= 0, path, ": cannot open packed shard: ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  FT_USER_CHECK(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), path, ": not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  FT_USER_CHECK(size >= kPairsHeaderBytes, path, ": packed shard is too small for its header (", size,
                " bytes, the header alone is ", kPairsHeaderBytes, "): truncated, or not a .pairs file");
  Header h{};
  FT_USER_CHECK(::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h), path, ": cannot read header");
  FT_USER_CHECK(std::memcmp(h.magic, kPairsMagic, 8) == 0, path,
                ": not a packed prompt/response shard (bad magic; expected \"FTPAIRS\")");
  FT_USER_CHECK(h.version == kPairsVersion, path, ": unsupported .pairs version ", h.version, " (this build reads ",
                kPairsVersion, ")");
  FT_USER_CHECK(h.header_crc == crc32c(&h, 60), path, ": header CRC mismatch (corrupted file)");
  FT_USER_CHECK(h.header_bytes == kPairsHeaderBytes && h.seq_len > 0 && h.seq_len < kPairsTruncatedBit &&
                    (h.token_bytes == 2 || h.token_bytes == 4) && h.loss_on <= 1,
                path, ": inconsistent .pairs header");
  // Every count bounded by the file size before any arithmetic that could overflow.
  FT_USER_CHECK(h.rows <= size && h.samples <= size && h.tokens <= size && h.rows <= h.samples &&
                    h.samples <= h.tokens,
                path, ": inconsistent .pairs header (", h.rows, " rows, ", h.samples, " samples, ", h.tokens,
                " tokens in ", size, " bytes)");
  const uint64_t tables = kPairsHeaderBytes + pad8(h.tokens * h.token_bytes);
  const uint64_t expected = tables + h.samples * 8 + (h.rows + 1) * 16 + h.rows * 4;
  FT_USER_CHECK(size == expected, path, ": packed shard size mismatch: the header says ", h.rows, " rows, ",
                h.samples, " samples and ", h.tokens, " tokens, so ", expected, " bytes, but the file has ", size,
                size < expected ? " (truncated?)" : " (trailing data)");
  map_bytes_ = size;
  void* m = map_data_file(fd, size);
  FT_USER_CHECK(m != MAP_FAILED, path, ": cannot mmap packed shard: ", std::strerror(errno));
  map_ = m;
  try {
    validate(&h, size);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

void PackedShard::validate(const void* header, uint64_t size) {
  const Header& h = *static_cast<const Header*>(header);
  const uint64_t tables = kPairsHeaderBytes + pad8(h.tokens * h.token_bytes);
  const auto* base = static_cast<const unsigned char*>(map_);
  const std::string& path = path_;
  FT_USER_CHECK(crc32c(base + tables, size - tables) == h.tables_crc, path,
                ": table CRC mismatch (corrupted file)");
  seq_len_ = h.seq_len;
  token_bytes_ = h.token_bytes;
  end_of_text_ = h.end_of_text;
  loss_on_ = static_cast<LossOn>(h.loss_on);
  rows_ = h.rows;
  samples_ = h.samples;
  tokens_ = h.tokens;
  tok_ = base + kPairsHeaderBytes;
  sample_table_ = reinterpret_cast<const uint32_t*>(base + tables);
  row_tokens_ = reinterpret_cast<const uint64_t*>(base + tables + samples_ * 8);
  row_samples_ = row_tokens_ + rows_ + 1;
  row_loss_ = reinterpret_cast<const uint32_t*>(row_samples_ + rows_ + 1);

  // The tables, row by row: read_row and pair() may then trust them.
  FT_USER_CHECK(row_tokens_[0] == 0 && row_samples_[0] == 0 && row_tokens_[rows_] == tokens_ &&
                    row_samples_[rows_] == samples_,
                path, ": row tables do not cover the shard (corrupted file)");
  for (uint64_t r = 0; r < rows_; ++r) {
    const uint64_t s0 = row_samples_[r], s1 = row_samples_[r + 1];
    FT_USER_CHECK(s0 < s1 && s1 <= samples_, path, ": row ", r, " has a bad sample range");
    uint64_t toks = 0, positions = 0, loss = 0;
    for (uint64_t s = s0; s < s1; ++s) {
      const uint32_t n = sample_len(s), p = sample_prompt(s);
      FT_USER_CHECK(n >= 2 && p <= n, path, ": sample ", s, " has ", n, " tokens and a prompt of ", p);
      toks += n;
      positions += n - 1;
      loss += sample_loss_tokens(n, p, loss_on_);
    }
    FT_USER_CHECK(positions <= seq_len_ && row_tokens_[r] + toks == row_tokens_[r + 1] && loss == row_loss_[r],
                  path, ": row ", r, " is inconsistent (", positions, " positions for T=", seq_len_,
                  ", or its token range or loss count disagrees with its samples)");
  }
  // The token table's pages handed back as the scan passes them (see TokenShard::max_token).
  constexpr uint64_t kPer = uint64_t{16} << 20;
  for (uint64_t b = 0; b < tokens_; b += kPer) {
    const uint64_t e = std::min(tokens_, b + kPer);
    for (uint64_t i = b; i < e; ++i) max_token_ = std::max(max_token_, token(i));
    release_data_range(tok_ + b * token_bytes_, (e - b) * token_bytes_);
  }
}

PackedShard::~PackedShard() { release(); }

void PackedShard::release() noexcept {
  unmap_data_file(map_, map_bytes_);
  map_ = nullptr;
}

PackedShard::PackedShard(PackedShard&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      seq_len_(o.seq_len_),
      token_bytes_(o.token_bytes_),
      end_of_text_(o.end_of_text_),
      max_token_(o.max_token_),
      loss_on_(o.loss_on_),
      rows_(o.rows_),
      samples_(o.samples_),
      tokens_(o.tokens_),
      tok_(o.tok_),
      sample_table_(o.sample_table_),
      row_tokens_(o.row_tokens_),
      row_samples_(o.row_samples_),
      row_loss_(o.row_loss_) {
  o.map_ = nullptr;
}

uint64_t PackedShard::row_of_sample(uint64_t s) const {
  const uint64_t* it = std::upper_bound(row_samples_, row_samples_ + rows_ + 1, s);
  return static_cast<uint64_t>(it - row_samples_) - 1;
}

uint64_t PackedShard::sample_first_token(uint64_t s) const {
  const uint64_t r = row_of_sample(s);
  uint64_t t = row_tokens_[r];
  for (uint64_t k = row_samples_[r]; k < s; ++k) t += sample_len(k);
  return t;
}

// ---- data set ----

PackedDataset::PackedDataset(const std::string& spec, int seq_len, uint32_t vocab_size, const std::string& flag)
    : seq_len_(seq_len), vocab_size_(vocab_size), flag_(flag) {
  open(resolve_data_files(spec, flag, ".pairs"));
}

PackedDataset::PackedDataset(const std::vector<std::string>& files, int seq_len, uint32_t vocab_size,
                             const std::string& flag)
    : seq_len_(seq_len), vocab_size_(vocab_size), flag_(flag) {
  FT_USER_CHECK(!files.empty(), flag, ": no .pairs shard files given");
  open(files);
}

void PackedDataset::open(const std::vector<std::string>& files) {
  FT_USER_CHECK(seq_len_ > 0, flag_, ": sequence length T=", seq_len_, " must be positive");
  FT_USER_CHECK(vocab_size_ > 0, flag_, ": vocab size must be positive");
  row_offsets_.assign(1, 0);
  sample_offsets_.assign(1, 0);
  shards_.reserve(files.size());
  for (const std::string& f : files) {
    try {
      shards_.emplace_back(f);
    } catch (const UserError& e) {
      throw UserError(detail::concat(e.what(), " (", flag_, ")"));
    }
    const PackedShard& s = shards_.back();
    FT_USER_CHECK(s.seq_len() == static_cast<uint32_t>(seq_len_), f, ": rows were packed for T=", s.seq_len(),
                  " but training uses --seq-len ", seq_len_, ": re-run `fittrain prepare` with --seq-len ", seq_len_,
                  ", or train with --seq-len ", s.seq_len(), " (", flag_, ")");
    FT_USER_CHECK(s.rows() == 0 || s.max_token() < vocab_size_, f, ": token ", s.max_token(),
                  " is outside the vocabulary (vocab size ", vocab_size_,
                  "); was this data tokenized for another model? (", flag_, ")");
    if (shards_.size() == 1) {
      loss_on_ = s.loss_on();
      end_of_text_ = s.end_of_text();
    }
    FT_USER_CHECK(s.loss_on() == loss_on_ && s.end_of_text() == end_of_text_, f, ": prepared with --loss-on ",
                  loss_on_name(s.loss_on()), " and end-of-text ", s.end_of_text(), ", unlike ", files[0], " (",
                  loss_on_name(loss_on_), ", ", end_of_text_, "): prepare them together (", flag_, ")");
    for (uint64_t r = 0; r < s.rows(); ++r) total_loss_ += s.row_loss(r);
    row_offsets_.push_back(row_offsets_.back() + s.rows());
    sample_offsets_.push_back(sample_offsets_.back() + s.samples());
  }
  FT_USER_CHECK(num_samples() > 0, flag_, ": the .pairs shards hold no rows");
}

std::vector<FieldSpec> PackedDataset::fields() const {
  return {FieldSpec{"tokens", DType::i32, seq_len_}, FieldSpec{"targets", DType::i32, seq_len_},
          FieldSpec{"positions", DType::i32, seq_len_}};
}

std::pair<size_t, uint64_t> PackedDataset::locate(const std::vector<uint64_t>& offsets, uint64_t i) const {
  const auto it = std::upper_bound(offsets.begin(), offsets.end(), i);
  const size_t s = static_cast<size_t>(it - offsets.begin()) - 1;
  return {s, i - offsets[s]};
}

void PackedDataset::read_row(uint64_t row, int32_t* tokens, int32_t* targets, int32_t* positions) const {
  FT_CHECK(row < num_samples(), "row ", row, " out of range (", num_samples(), " rows)");
  const auto [si, r] = locate(row_offsets_, row);
  const PackedShard& sh = shards_[si];
  const bool all = sh.loss_on() == LossOn::kAll;
  uint64_t t = sh.row_first_token(r);
  int pos = 0;
  for (uint64_t s = sh.row_first_sample(r); s < sh.row_first_sample(r + 1); ++s) {
    const uint32_t n = sh.sample_len(s), p = sh.sample_prompt(s);
    for (uint32_t j = 0; j + 1 < n; ++j, ++pos) {
      tokens[pos] = static_cast<int32_t>(sh.token(t + j));
      const uint32_t next = sh.token(t + j + 1);
      targets[pos] = all || j + 1 >= p ? static_cast<int32_t>(next) : -1;
      positions[pos] = static_cast<int32_t>(j);
    }
    t += n;
  }
  // The padding: end-of-text inputs, no loss, a segment of its own.
  for (int j = 0; pos < seq_len_; ++pos, ++j) {
    tokens[pos] = static_cast<int32_t>(end_of_text_);
    targets[pos] = -1;
    positions[pos] = j;
  }
}

uint32_t PackedDataset::loss_tokens(uint64_t row) const {
  FT_CHECK(row < num_samples(), "row ", row, " out of range");
  const auto [si, r] = locate(row_offsets_, row);
  return shards_[si].row_loss(r);
}

uint64_t PackedDataset::loss_tokens(std::span<const uint64_t> rows) const {
  uint64_t n = 0;
  for (uint64_t r : rows) n += loss_tokens(r);
  return n;
}

void PackedDataset::pair(uint64_t i, std::vector<int32_t>& prompt, std::vector<int32_t>& response) const {
  FT_CHECK(i < num_pairs(), "pair ", i, " out of range (", num_pairs(), ")");
  const auto [si, s] = locate(sample_offsets_, i);
  const PackedShard& sh = shards_[si];
  const uint64_t t0 = sh.sample_first_token(s);
  const uint32_t n = sh.sample_len(s), p = sh.sample_prompt(s);
  const uint32_t end = sh.sample_truncated(s) ? n : n - 1;  // drop the end-of-text
  prompt.clear();
  response.clear();
  for (uint32_t j = 0; j < p; ++j) prompt.push_back(static_cast<int32_t>(sh.token(t0 + j)));
  for (uint32_t j = p; j < end; ++j) response.push_back(static_cast<int32_t>(sh.token(t0 + j)));
}

bool PackedDataset::pair_truncated(uint64_t i) const {
  FT_CHECK(i < num_pairs(), "pair ", i, " out of range (", num_pairs(), ")");
  const auto [si, s] = locate(sample_offsets_, i);
  return shards_[si].sample_truncated(s);
}

}  // namespace ft
