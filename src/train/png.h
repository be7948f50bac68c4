// A small RGB raster and a PNG encoder, enough to draw the report's line charts
// (train/chart.h) without an image library: anti-aliased thick polylines, filled
// rectangles and a built-in 5x7 bitmap font (digits, capital letters, a little
// punctuation; lower case is drawn in capitals).
//
// The encoder writes 8-bit truecolour (colour type 2), no interlace, every row with filter
// 0 (none): the simplest valid PNG. zlib's deflate makes the flat chart backgrounds small
// anyway, and zlib's crc32 is the CRC the PNG format specifies.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// "#rrggbb" (the colours the HTML uses) -> Rgb; InternalError on anything else.
Rgb parse_hex_colour(const std::string& hex);

class Image {
 public:
  Image(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  // Row-major RGB bytes, 3 per pixel, no padding.
  const std::vector<uint8_t>& pixels() const { return px_; }
  Rgb at(int x, int y) const;

  // Out-of-range pixels are ignored, so callers may draw past the edges.
  void set(int x, int y, Rgb c);
  // Mixes c over the pixel with coverage alpha in [0, 1].
  void blend(int x, int y, Rgb c, double alpha);
  // Pixels [x0, x1) x [y0, y1).
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);
  // Anti-aliased polyline of the given width. Coordinates are continuous: pixel (x, y)
  // covers [x, x+1) x [y, y+1), so a 2 px horizontal line at y = 20 fills rows 19 and 20
  // exactly. Each pixel takes the largest coverage of any segment, so joints are not
  // drawn twice (no dark knots where segments overlap).
  void polyline(const std::vector<std::pair<double, double>>& points, Rgb c, double width);
  void line(double x0, double y0, double x1, double y1, Rgb c, double width) { polyline({{x0, y0}, {x1, y1}}, c, width); }
  // Text in the 5x7 font, each font pixel scale x scale pixels, glyphs 6*scale apart; (x, y)
  // is the top left. Characters without a glyph are drawn as blanks.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 1);
  static int text_width(const std::string& s, int scale = 1) { return s.empty() ? 0 : static_cast<int>(s.size()) * 6 * scale - scale; }
  static int text_height(int scale = 1) { return 7 * scale; }

 private:
  int width_, height_;
  std::vector<uint8_t> px_;
};

// The PNG file's bytes.
std::string encode_png(const Image& img);
// Writes encode_png(img) to path; UserError naming the path when it cannot be written.
void write_png(const std::string& path, const Image& img);

}  // namespace ft
