// Rasterizer and PNG encoder (train/png.h).
#include "train/png.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.h"

namespace ft {

namespace {

// 5x7 glyphs, one byte per row from the top, bit 4 the leftmost column.
struct Glyph {
  char c;
  uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}}, {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}}, {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}}, {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}}, {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
};

const Glyph* find_glyph(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const Glyph& g : kFont)
    if (g.c == c) return &g;
  return nullptr;
}

// Distance from p to the segment a-b.
double segment_distance(double px, double py, double ax, double ay, double bx, double by) {
  const double dx = bx - ax, dy = by - ay;
  const double len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / len2 : 0.0;
  t = std::clamp(t, 0.0, 1.0);
  const double ex = ax + t * dx - px, ey = ay + t * dy - py;
  return std::sqrt(ex * ex + ey * ey);
}

void put_u32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xFF));
}

// length, type, data, CRC-32 of type and data (the PNG chunk layout).
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

}  // namespace

Rgb parse_hex_colour(const std::string& hex) {
  FT_CHECK(hex.size() == 7 && hex[0] == '#', "colour '", hex, "' is not #rrggbb");
  auto byte = [&](size_t i) { return static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)); };
  return {byte(1), byte(3), byte(5)};
}

Image::Image(int width, int height, Rgb background) : width_(width), height_(height) {
  FT_CHECK(width > 0 && height > 0 && width <= 1 << 14 && height <= 1 << 14, "image size ", width, "x", height);
  px_.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  for (size_t i = 0; i < px_.size(); i += 3) {
    px_[i] = background.r;
    px_[i + 1] = background.g;
    px_[i + 2] = background.b;
  }
}

Rgb Image::at(int x, int y) const {
  FT_CHECK(x >= 0 && y >= 0 && x < width_ && y < height_, "pixel ", x, ",", y, " outside ", width_, "x", height_);
  const size_t i = (static_cast<size_t>(y) * static_cast<size_t>(width_) + static_cast<size_t>(x)) * 3;
  return {px_[i], px_[i + 1], px_[i + 2]};
}

void Image::set(int x, int y, Rgb c) { blend(x, y, c, 1.0); }

void Image::blend(int x, int y, Rgb c, double alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || alpha <= 0) return;
  alpha = std::min(alpha, 1.0);
  uint8_t* p = &px_[(static_cast<size_t>(y) * static_cast<size_t>(width_) + static_cast<size_t>(x)) * 3];
  const uint8_t src[3] = {c.r, c.g, c.b};
  for (int k = 0; k < 3; ++k) p[k] = static_cast<uint8_t>(std::lround(p[k] + (src[k] - p[k]) * alpha));
}

void Image::fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
  for (int y = std::max(y0, 0); y < std::min(y1, height_); ++y)
    for (int x = std::max(x0, 0); x < std::min(x1, width_); ++x) set(x, y, c);
}

void Image::polyline(const std::vector<std::pair<double, double>>& pts, Rgb c, double width) {
  if (pts.empty()) return;
  const double reach = width / 2 + 1;
  double lo_x = pts[0].first, hi_x = lo_x, lo_y = pts[0].second, hi_y = lo_y;
  for (auto [x, y] : pts) {
    lo_x = std::min(lo_x, x), hi_x = std::max(hi_x, x);
    lo_y = std::min(lo_y, y), hi_y = std::max(hi_y, y);
  }
  const int bx0 = std::max(0, static_cast<int>(std::floor(lo_x - reach)));
  const int by0 = std::max(0, static_cast<int>(std::floor(lo_y - reach)));
  const int bx1 = std::min(width_, static_cast<int>(std::ceil(hi_x + reach)) + 1);
  const int by1 = std::min(height_, static_cast<int>(std::ceil(hi_y + reach)) + 1);
  if (bx0 >= bx1 || by0 >= by1) return;
  const int mw = bx1 - bx0;
  // Coverage of each pixel in the bounding box: the largest over the segments.
  std::vector<float> cover(static_cast<size_t>(mw) * static_cast<size_t>(by1 - by0), 0.0f);
  const size_t nseg = pts.size() == 1 ? 1 : pts.size() - 1;
  for (size_t s = 0; s < nseg; ++s) {
    const auto [ax, ay] = pts[s];
    const auto [qx, qy] = pts[std::min(s + 1, pts.size() - 1)];
    const int x0 = std::max(bx0, static_cast<int>(std::floor(std::min(ax, qx) - reach)));
    const int x1 = std::min(bx1, static_cast<int>(std::ceil(std::max(ax, qx) + reach)) + 1);
    const int y0 = std::max(by0, static_cast<int>(std::floor(std::min(ay, qy) - reach)));
    const int y1 = std::min(by1, static_cast<int>(std::ceil(std::max(ay, qy) + reach)) + 1);
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        // A pixel's coverage approximated from its centre's distance to the line's core.
        const double d = segment_distance(x + 0.5, y + 0.5, ax, ay, qx, qy);
        const float cov = static_cast<float>(std::clamp(width / 2 + 0.5 - d, 0.0, 1.0));
        float& m = cover[static_cast<size_t>(y - by0) * static_cast<size_t>(mw) + static_cast<size_t>(x - bx0)];
        m = std::max(m, cov);
      }
  }
  for (int y = by0; y < by1; ++y)
    for (int x = bx0; x < bx1; ++x)
      blend(x, y, c, cover[static_cast<size_t>(y - by0) * static_cast<size_t>(mw) + static_cast<size_t>(x - bx0)]);
}

void Image::text(int x, int y, const std::string& s, Rgb c, int scale) {
  for (size_t i = 0; i < s.size(); ++i) {
    const Glyph* g = find_glyph(s[i]);
    if (!g) continue;
    const int gx = x + static_cast<int>(i) * 6 * scale;
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col)
        if (g->rows[row] & (0x10 >> col))
          fill_rect(gx + col * scale, y + row * scale, gx + (col + 1) * scale, y + (row + 1) * scale, c);
  }
}

std::string encode_png(const Image& img) {
  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(img.width()));
  put_u32(ihdr, static_cast<uint32_t>(img.height()));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, truecolour, deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);
  // Scanlines, each led by its filter type (0: none).
  const size_t row = static_cast<size_t>(img.width()) * 3;
  std::string raw;
  raw.reserve((row + 1) * static_cast<size_t>(img.height()));
  for (int y = 0; y < img.height(); ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(img.pixels().data()) + static_cast<size_t>(y) * row, row);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::string z(zlen, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()),
                           static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION);
  FT_CHECK(rc == Z_OK, "zlib compress2 failed: ", rc);
  z.resize(zlen);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", "");
  return out;
}

void write_png(const std::string& path, const Image& img) {
  const std::string bytes = encode_png(img);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FT_USER_CHECK(f.good(), path, ": cannot write the image");
}

}  // namespace ft
