// .npy header parsing, C-order float32 conversion and the writer; see npy.h.
#include "data/npy.h"

#include <bit>
#include <cstring>

#include "core/error.h"
#include "data/mapped_file.h"
#include "data/movielens.h"

namespace ft {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

// The header dict, a Python literal: parsed by hand, refusing anything numpy does not write.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : t_(text), where_(where) {}

  void parse(NpyHeader& h) {
    bool have_descr = false, have_order = false, have_shape = false;
    ws();
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') break;
      const std::string key = string_literal("a key");
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        dup(have_descr, key);
        h.descr = string_literal("key 'descr': a dtype string");
        descr(h);
      } else if (key == "fortran_order") {
        dup(have_order, key);
        h.fortran_order = boolean();
      } else if (key == "shape") {
        dup(have_shape, key);
        shape(h.shape);
      } else {
        fail("unexpected key '" + key + "' (an .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') fail(detail::concat("expected ',' or '}' at byte ", i_));
    }
    ++i_;
    ws();
    if (i_ != t_.size()) fail(detail::concat("unexpected text after the header dict at byte ", i_));
    if (!have_descr) fail("key 'descr' is missing");
    if (!have_order) fail("key 'fortran_order' is missing");
    if (!have_shape) fail("key 'shape' is missing");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(where_ + ": bad .npy header: " + what + " (header: " + std::string(t_.substr(0, 200)) + ")");
  }
  char peek() const { return i_ < t_.size() ? t_[i_] : '\0'; }
  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(detail::concat("expected '", c, "' at byte ", i_));
    ++i_;
  }
  void dup(bool& seen, const std::string& key) {
    if (seen) fail("key '" + key + "' appears twice");
    seen = true;
  }
  std::string string_literal(const char* what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail(detail::concat("expected ", what, " in quotes at byte ", i_));
    const size_t start = ++i_;
    while (i_ < t_.size() && t_[i_] != q) {
      if (t_[i_] == '\\') fail("escapes in strings are not supported");
      ++i_;
    }
    if (i_ >= t_.size()) fail("unterminated string");
    return std::string(t_.substr(start, i_++ - start));
  }
  bool boolean() {
    if (t_.substr(i_, 4) == "True") return i_ += 4, true;
    if (t_.substr(i_, 5) == "False") return i_ += 5, false;
    fail("key 'fortran_order': expected True or False");
  }
  void descr(NpyHeader& h) {
    const std::string& d = h.descr;
    const bool ok = d.size() == 3 && (d[0] == '<' || d[0] == '>' || d[0] == '=') && d[1] == 'f' &&
                    (d[2] == '4' || d[2] == '8');
    if (!ok)
      fail("key 'descr': dtype '" + d + "' is not supported (float32 '<f4' or float64 '<f8' expected; convert with "
           "arr.astype(np.float32))");
    h.big_endian = d[0] == '>';
    h.elem_bytes = d[2] - '0';
  }
  void shape(std::vector<int64_t>& s) {
    expect('(');
    for (;;) {
      ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail(detail::concat("key 'shape': expected a dimension at byte ", i_));
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + (t_[i_++] - '0');
        if (v > kNpyMaxDim) fail(detail::concat("key 'shape': dimension larger than ", kNpyMaxDim));
      }
      if (peek() == 'L') ++i_;  // Python 2's long literals
      s.push_back(v);
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != ')') fail(detail::concat("key 'shape': expected ',' or ')' at byte ", i_));
    }
    ++i_;
    if (s.size() > 32) fail("key 'shape': more than 32 dimensions");
  }

  std::string_view t_;
  const std::string& where_;
  size_t i_ = 0;
};

float load_elem(const uint8_t* p, int bytes, bool swap) {
  if (bytes == 4) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    if (swap) u = __builtin_bswap32(u);
    return std::bit_cast<float>(u);
  }
  uint64_t u;
  std::memcpy(&u, p, 8);
  if (swap) u = __builtin_bswap64(u);
  return static_cast<float>(std::bit_cast<double>(u));
}

// Element strides of the whole array in storage order.
std::vector<int64_t> storage_strides(const NpyHeader& h) {
  const size_t r = h.shape.size();
  std::vector<int64_t> s(r, 1);
  if (h.fortran_order) {
    for (size_t i = 1; i < r; ++i) s[i] = s[i - 1] * h.shape[i - 1];
  } else {
    for (size_t i = r; i-- > 1;) s[i - 1] = s[i] * h.shape[i];
  }
  return s;
}

}  // namespace

int64_t NpyHeader::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // parse_npy_header bounded the product
  return n;
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& where) {
  const uint8_t* b = bytes.data();
  const uint64_t n = bytes.size();
  FT_USER_CHECK(n >= 10 && std::memcmp(b, "\x93NUMPY", 6) == 0, where,
                ": not an .npy array (no \\x93NUMPY magic at the start; ", n, " bytes)");
  const int major = b[6], minor = b[7];
  FT_USER_CHECK(major >= 1 && major <= 3, where, ": unsupported .npy format version ", major, ".", minor,
                " (1.0, 2.0 and 3.0 are supported)");
  uint64_t prefix = 10, hlen = b[8] | b[9] << 8;
  if (major >= 2) {
    FT_USER_CHECK(n >= 12, where, ": .npy header truncated (", n, " bytes)");
    prefix = 12;
    hlen |= uint64_t{b[10]} << 16 | uint64_t{b[11]} << 24;
  }
  FT_USER_CHECK(hlen <= n - prefix, where, ": .npy header truncated: it claims ", hlen, " bytes, the file has ",
                n - prefix, " after the prefix");
  NpyHeader h;
  HeaderParser(std::string_view(reinterpret_cast<const char*>(b + prefix), hlen), where).parse(h);
  // Bound the element count so that every later size computation stays in 62 bits.
  uint64_t count = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && count > (uint64_t{1} << 58) / static_cast<uint64_t>(d))
      throw UserError(where + ": .npy shape " + shape_str(h.shape) + " is too large");
    count *= static_cast<uint64_t>(d);
  }
  h.data_offset = prefix + hlen;
  const uint64_t have = n - h.data_offset, need = h.data_bytes();
  FT_USER_CHECK(have == need, where, ": .npy data is ", have, " bytes but shape ", shape_str(h.shape), " of '", h.descr,
                "' needs ", need, have < need ? " (truncated?)" : " (trailing bytes)");
  return h;
}

void npy_copy_c_order(const NpyHeader& h, const uint8_t* data, int64_t outer, float* dst) {
  const std::vector<int64_t> stride = storage_strides(h);
  const size_t k0 = outer >= 0 ? 1 : 0;
  FT_CHECK(outer < 0 || (!h.shape.empty() && outer < h.shape[0]), "sub-array ", outer, " of shape ", shape_str(h.shape));
  const int64_t base = outer >= 0 ? outer * stride[0] : 0;
  const size_t r = h.shape.size() - k0;  // rank of what is copied
  int64_t total = 1;
  for (size_t i = k0; i < h.shape.size(); ++i) total *= h.shape[i];
  if (total == 0) return;
  const int eb = h.elem_bytes;
  const uint8_t* src = data + base * eb;
  if (r == 0) {
    dst[0] = load_elem(src, eb, h.big_endian);
    return;
  }
  const int64_t inner = h.shape.back(), inner_stride = stride.back();
  if (!h.fortran_order && eb == 4 && !h.big_endian) {  // C-order little-endian float32: contiguous as is
    std::memcpy(dst, src, static_cast<size_t>(total) * 4);
    return;
  }
  // General case: walk the C-order index, innermost dimension in the inner loop.
  std::vector<int64_t> idx(r, 0);
  for (int64_t done = 0; done < total; done += inner) {
    int64_t off = 0;
    for (size_t i = 0; i + 1 < r; ++i) off += idx[i] * stride[k0 + i];
    const uint8_t* p = src + off * eb;
    for (int64_t j = 0; j < inner; ++j) *dst++ = load_elem(p + j * inner_stride * eb, eb, h.big_endian);
    for (size_t i = r - 1; i-- > 0;) {
      if (++idx[i] < h.shape[k0 + i]) break;
      idx[i] = 0;
    }
  }
}

NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& where) {
  const NpyHeader h = parse_npy_header(bytes, where);
  NpyArray a;
  a.shape = h.shape;
  a.data.resize(static_cast<size_t>(h.count()));
  npy_copy_c_order(h, bytes.data() + h.data_offset, -1, a.data.data());
  return a;
}

NpyArray load_npy(const std::string& path) {
  const MappedFile f(path, "npy array");
  return parse_npy(f.bytes(), path);
}

std::vector<uint8_t> npy_bytes(std::span<const int64_t> shape, std::span<const float> data, bool fortran_order) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  FT_CHECK(count == static_cast<int64_t>(data.size()), "npy_bytes: shape ", shape_str(shape), " but ", data.size(),
           " values");
  std::string dict = std::string("{'descr': '<f4', 'fortran_order': ") + (fortran_order ? "True" : "False") +
                     ", 'shape': " + shape_str(shape) + ", }";
  // numpy pads the header with spaces and a final '\n' so that the data starts 64-aligned.
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  FT_CHECK(dict.size() <= 0xffff, "npy header too long");
  const uint8_t prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(dict.size()),
                              static_cast<uint8_t>(dict.size() >> 8)};
  const size_t at = sizeof prefix + dict.size();
  std::vector<uint8_t> out(at + data.size_bytes());
  std::memcpy(out.data(), prefix, sizeof prefix);
  std::memcpy(out.data() + sizeof prefix, dict.data(), dict.size());
  if (!fortran_order || shape.size() < 2) {
    std::memcpy(out.data() + at, data.data(), data.size_bytes());
    return out;
  }
  // Element with C-order multi-index (i0..ik) goes to Fortran position i0 + d0*(i1 + d1*(...)).
  NpyHeader f;
  f.shape.assign(shape.begin(), shape.end());
  f.fortran_order = true;
  const std::vector<int64_t> stride = storage_strides(f);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t c = 0; c < count; ++c) {
    int64_t off = 0;
    for (size_t i = 0; i < shape.size(); ++i) off += idx[i] * stride[i];
    std::memcpy(out.data() + at + off * 4, &data[c], 4);
    for (size_t i = shape.size(); i-- > 0;) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

void write_npy(const std::string& path, std::span<const int64_t> shape, std::span<const float> data,
               bool fortran_order) {
  const std::vector<uint8_t> bytes = npy_bytes(shape, data, fortran_order);
  const ByteRange piece{bytes.data(), bytes.size()};
  write_file_atomic(path, {&piece, 1});
}

}  // namespace ft
