// Line charts of a run's metrics (train/report.h), drawn twice from one layout: as inline
// SVG for report.html and as a raster (train/png.h) for the PNG files, so both show the
// same axes, ticks and lines.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "train/png.h"

namespace ft {

struct Series {
  std::string name;    // legend text
  std::string colour;  // "#rrggbb"
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
  bool markers = false;  // a dot per point (sparse series: validation loss)
  bool dashed = false;   // SVG only: keeps a line visible where it coincides with another
};

struct Chart {
  std::string name;     // file stem of its PNG: loss, lr, throughput, memory
  std::string title;
  std::string x_label, y_label;
  std::vector<Series> series;
  bool y_from_zero = false;  // quantities read as ratios (memory, throughput) start at 0
  bool has_data() const;
};

// An axis with "nice" ticks: the step is 1, 2 or 5 times a power of ten, lo and hi are
// multiples of it and enclose the data.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;
};
// integer: ticks are whole numbers (optimizer steps).
Axis nice_axis(double lo, double hi, bool from_zero, bool integer, int target_ticks = 5);
// A tick's label, as precise as the step needs: "0.25", "4k", "1.5M", "2e-5".
std::string format_tick(double v, double step);

// Text for SVG/HTML: & < > " as entities (the report's tables use it too).
std::string xml_escape(const std::string& s);

std::string chart_svg(const Chart& chart, int width, int height);
Image chart_image(const Chart& chart, int width, int height);

}  // namespace ft
