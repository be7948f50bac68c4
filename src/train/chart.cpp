// Chart layout, SVG and raster rendering (train/chart.h).
#include "train/chart.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ft {

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Decimals that show every multiple of step exactly (step is 1, 2 or 5 times a power of 10).
int decimals_for(double step) { return std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9))); }


// Everything both renderers share: the plot rectangle and the data -> pixel mapping.
struct Frame {
  double left = 0, top = 0, right = 0, bottom = 0;
  Axis x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

// label_width(text): the width a tick label takes in the renderer's font, so the left margin
// fits the longest one.
template <class Width>
Frame make_frame(const Chart& c, int width, int height, double top, double bottom_margin, Width label_width) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : c.series)
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!c.has_data()) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  Frame f;
  f.x = nice_axis(x0, x1, false, true);
  f.y = nice_axis(y0, y1, c.y_from_zero, false);
  double widest = 0;
  for (double t : f.y.ticks) widest = std::max(widest, label_width(format_tick(t, f.y.step)));
  f.left = 34 + widest;  // the rotated y label (SVG), then the tick labels
  f.right = width - 20;
  f.top = top;
  f.bottom = height - bottom_margin;
  return f;
}

}  // namespace

bool Chart::has_data() const {
  for (const Series& s : series)
    if (!s.points.empty()) return true;
  return false;
}

Axis nice_axis(double lo, double hi, bool from_zero, bool integer, int target_ticks) {
  if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (!(hi > lo)) {  // one value: a little room around it
    const double pad = lo != 0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= pad, hi += pad;
    if (from_zero && lo < 0 && hi - pad >= 0) lo = 0;
  }
  const double raw = (hi - lo) / target_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  if (integer) step = std::max(step, 1.0);
  Axis a;
  a.step = step;
  const double k0 = std::floor(lo / step + 1e-9), k1 = std::ceil(hi / step - 1e-9);
  a.lo = k0 * step;
  a.hi = std::max(k1, k0 + 1) * step;
  for (double k = k0; k <= k1 + 1e-9; k += 1) a.ticks.push_back(k * step);
  return a;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string format_tick(double v, double step) {
  if (std::abs(v) < step * 1e-6) return "0";
  if (step >= 1e6) return fixed(v / 1e6, decimals_for(step / 1e6)) + "M";
  if (step >= 1e3) return fixed(v / 1e3, decimals_for(step / 1e3)) + "k";
  if (step < 1e-3) {  // learning rates: mantissa and exponent, "3e-5", "2.5e-4"
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2g", v);
    std::string s = buf;
    for (const char* z : {"e-0", "e+0"}) {
      const size_t p = s.find(z);
      if (p != std::string::npos) s.erase(p + 2, 1);
    }
    return s;
  }
  return fixed(v, decimals_for(step));
}

// ---- SVG ----

std::string chart_svg(const Chart& c, int width, int height) {
  // 12 px text is about 6.8 px a character in the sans-serif fonts browsers pick.
  auto text_w = [](const std::string& s) { return 6.8 * static_cast<double>(s.size()); };
  const Frame f = make_frame(c, width, height, 46, 44, text_w);
  std::string o;
  char b[512];
  std::snprintf(b, sizeof b,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
                "role=\"img\" aria-label=\"%s\" font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, "
                "Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
                width, height, width, height, xml_escape(c.title).c_str());
  o += b;
  std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"22\" font-size=\"15\" font-weight=\"600\" fill=\"#111827\">%s</text>\n",
                f.left, xml_escape(c.title).c_str());
  o += b;
  // Grid and ticks.
  for (double t : f.y.ticks) {
    const double y = f.py(t);
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e7eb\"/>"
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#6b7280\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#4b5563\">%s</text>\n",
                  f.left, y, f.right, y, f.left - 5, y, f.left, y, f.left - 8, y + 4, format_tick(t, f.y.step).c_str());
    o += b;
  }
  for (double t : f.x.ticks) {
    const double x = f.px(t);
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#f1f2f4\"/>"
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#6b7280\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#4b5563\">%s</text>\n",
                  x, f.top, x, f.bottom, x, f.bottom, x, f.bottom + 5, x, f.bottom + 18,
                  format_tick(t, f.x.step).c_str());
    o += b;
  }
  // Axes, then their labels.
  std::snprintf(b, sizeof b, "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"#6b7280\"/>\n", f.left, f.top,
                f.bottom, f.right);
  o += b;
  std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#374151\">%s</text>\n",
                (f.left + f.right) / 2, height - 8, xml_escape(c.x_label).c_str());
  o += b;
  std::snprintf(b, sizeof b,
                "<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\" fill=\"#374151\">%s</text>\n",
                (f.top + f.bottom) / 2, xml_escape(c.y_label).c_str());
  o += b;
  if (!c.has_data()) {
    std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#9ca3af\">no data in the metrics file</text>\n",
                  (f.left + f.right) / 2, (f.top + f.bottom) / 2);
    o += b;
  }
  // Lines, markers (each with a tooltip), legend right-aligned above the plot.
  for (const Series& s : c.series) {
    if (s.points.empty()) continue;
    o += "<polyline fill=\"none\" stroke=\"" + s.colour + "\" stroke-width=\"2\" stroke-linejoin=\"round\" " +
         (s.dashed ? "stroke-dasharray=\"6 4\" " : "") + "points=\"";
    for (auto [x, y] : s.points) {
      std::snprintf(b, sizeof b, "%.1f,%.1f ", f.px(x), f.py(y));
      o += b;
    }
    o += "\"/>\n";
    if (s.markers)
      for (auto [x, y] : s.points) {
        std::snprintf(b, sizeof b,
                      "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"1\">"
                      "<title>step %.0f: %.4g</title></circle>\n",
                      f.px(x), f.py(y), s.colour.c_str(), x, y);
        o += b;
      }
  }
  double lx = f.right;
  for (auto it = c.series.rbegin(); it != c.series.rend(); ++it) {
    lx -= text_w(it->name);
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"36\" x2=\"%.1f\" y2=\"36\" stroke=\"%s\" stroke-width=\"2.5\"%s/>"
                  "<text x=\"%.1f\" y=\"40\" fill=\"#374151\">%s</text>\n",
                  lx - 24, lx - 6, it->colour.c_str(), it->dashed ? " stroke-dasharray=\"6 4\"" : "", lx,
                  xml_escape(it->name).c_str());
    o += b;
    lx -= 40;
  }
  o += "</svg>\n";
  return o;
}

// ---- raster ----

Image chart_image(const Chart& c, int width, int height) {
  constexpr int kScale = 2;  // the 5x7 font doubled: 14 px capitals
  const Rgb ink{0x37, 0x41, 0x51}, axis{0x6b, 0x72, 0x80}, grid{0xe5, 0xe7, 0xeb};
  auto text_w = [](const std::string& s) { return static_cast<double>(Image::text_width(s, kScale)); };
  const Frame f = make_frame(c, width, height, 64, 56, text_w);
  Image img(width, height, Rgb{255, 255, 255});
  const int L = static_cast<int>(std::lround(f.left)), R = static_cast<int>(std::lround(f.right));
  const int T = static_cast<int>(std::lround(f.top)), B = static_cast<int>(std::lround(f.bottom));
  for (double t : f.y.ticks) {
    const int y = static_cast<int>(std::lround(f.py(t)));
    img.fill_rect(L, y, R, y + 1, grid);
    img.fill_rect(L - 6, y, L, y + 1, axis);
    const std::string s = format_tick(t, f.y.step);
    img.text(L - 10 - Image::text_width(s, kScale), y - Image::text_height(kScale) / 2, s, ink, kScale);
  }
  for (double t : f.x.ticks) {
    const int x = static_cast<int>(std::lround(f.px(t)));
    img.fill_rect(x, B, x + 1, B + 6, axis);
    const std::string s = format_tick(t, f.x.step);
    img.text(x - Image::text_width(s, kScale) / 2, B + 10, s, ink, kScale);
  }
  img.fill_rect(L, T, L + 1, B + 1, axis);  // the y axis
  img.fill_rect(L, B, R + 1, B + 1, axis);  // the x axis
  // The font has no rotated form: the y label (the unit) joins the title unless it repeats it.
  auto upper = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s;
  };
  const std::string title = upper(c.y_label) == upper(c.title) ? c.title : c.title + " (" + c.y_label + ")";
  img.text(L, 14, title, Rgb{0x11, 0x18, 0x27}, kScale);
  img.text((L + R - Image::text_width(c.x_label, kScale)) / 2, height - 20, c.x_label, ink, kScale);
  if (!c.has_data()) {
    const std::string s = "no data";
    img.text((L + R - Image::text_width(s, kScale)) / 2, (T + B) / 2, s, axis, kScale);
  }
  for (const Series& s : c.series) {
    if (s.points.empty()) continue;
    const Rgb col = parse_hex_colour(s.colour);
    std::vector<std::pair<double, double>> pts;
    for (auto [x, y] : s.points) pts.emplace_back(f.px(x), f.py(y));
    img.polyline(pts, col, 2.0);
    if (s.markers)
      for (auto [x, y] : pts) img.polyline({{x, y}}, col, 7.0);  // a dot: a zero-length thick line
  }
  int lx = R;
  for (auto it = c.series.rbegin(); it != c.series.rend(); ++it) {
    lx -= Image::text_width(it->name, kScale);
    img.text(lx, 14 + 22, it->name, ink, kScale);
    img.fill_rect(lx - 26, 14 + 22 + 6, lx - 8, 14 + 22 + 9, parse_hex_colour(it->colour));
    lx -= 44;
  }
  return img;
}

}  // namespace ft
