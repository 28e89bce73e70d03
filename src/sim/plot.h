// Line charts written as PNG files, drawn here and compressed by zlib: the simulator's
// reports (utilisation and queue length over time per policy, the JCT CDF per policy)
// are drawn with it.
//
// A chart is a white canvas with a title, a y axis and an x axis with round tick values
// (0, 0.25, 0.5; 1k, 2k; decades on a log axis) and light gridlines, axis labels, one
// line per series in the Okabe-Ito colour-blind-friendly palette, and a legend to the
// right of the plot area. Text uses a small bitmap font embedded in plot.cc. Lines are
// anti-aliased and two pixels wide (scaled up with the text on charts of 1800x1000 and
// more).
//
// Series of any length draw in time linear in their length and independent of their
// shape: consecutive points that fall in the same pixel column are merged into one
// vertical span from their lowest to their highest y, which is what a line through them
// would cover anyway, so a million points cost about as much to draw as a thousand.
//
// A point that cannot be placed (x or y NaN, infinite or beyond +-1e300; x <= 0 on a log
// axis) breaks its line, as missing data; a point with no placeable neighbour is drawn
// as a dot. Parts of lines above a y_max are clipped at the plot area.
//
// The PNG is 8-bit RGB, not interlaced, every row with filter type 0 (None), in one IDAT
// chunk holding the zlib stream of zlib's compress2 at its default level; chunk CRCs
// are zlib's crc32.
//
// Thread-safety: pure functions of their arguments; safe to call from several threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace trainyard::sim {

// One line of a chart: the points (x[i], y[i]), joined in order. x and y must have the
// same length.
struct Series {
  std::string label;
  std::vector<double> x;
  std::vector<double> y;
};

struct ChartOptions {
  std::string title;
  std::string x_label;  // the unit is the caller's: pass x in hours and say so here
  std::string y_label;
  int width = 960;   // pixels, 320..8192
  int height = 540;  // pixels, 200..8192; width * height at most 4096 * 4096
  // The y axis includes 0 (it starts there unless some y is negative); otherwise it
  // starts at a round value at or below the lowest y.
  bool y_from_zero = true;
  // The top of the y axis; by default the first round tick at or above the highest y.
  std::optional<double> y_max;
  // Logarithmic x axis, ticked at powers of ten; points with x <= 0 cannot be placed.
  bool x_log = false;
  // Staircase lines: y[i] holds from x[i] until x[i+1] (queue lengths, CDFs).
  bool step = false;
};

struct Rgb {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

// Series i is drawn in kSeriesColors[i % 8]: the Okabe-Ito palette, ordered so that the
// first colours read best on white (yellow last).
inline constexpr std::array<Rgb, 8> kSeriesColors = {{
    {0, 114, 178},    // blue
    {213, 94, 0},     // vermillion
    {0, 158, 115},    // bluish green
    {204, 121, 167},  // reddish purple
    {230, 159, 0},    // orange
    {86, 180, 233},   // sky blue
    {0, 0, 0},        // black
    {240, 228, 66},   // yellow
}};

// An RGB raster, row-major from the top row, three bytes per pixel.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;

  // REQUIRES: 0 <= x < width, 0 <= y < height.
  Rgb At(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * static_cast<size_t>(width) + x) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

// Returns the chart, or InvalidArgument when the size is out of range, a series' x and y
// differ in length, or y_max is not above the bottom of the y axis.
Result<Image> RenderLineChart(const std::vector<Series>& series, const ChartOptions& options);

// Renders the chart and writes it to `path` as a PNG. Errors name the path and the cause.
Status WriteLineChartPng(const std::string& path, const std::vector<Series>& series,
                         const ChartOptions& options);

// ---- Building blocks, exposed for tests ----

// Tick positions on an axis, with their labels.
struct Ticks {
  double step = 0;             // between consecutive values; 0 on a log axis
  std::vector<double> values;  // ascending, all within [lo, hi]
  std::vector<std::string> labels;
  std::vector<double> minor;  // unlabelled ticks (2..9 times each power of ten, log axes)
};

// At most max_ticks round values in [lo, hi]: multiples of 1, 2, 2.5 or 5 times a power
// of ten. REQUIRES: lo < hi, both finite; max_ticks >= 2.
Ticks LinearTicks(double lo, double hi, int max_ticks);

// Powers of ten in [lo, hi] (every second or fifth one where there are more than
// max_ticks), or LinearTicks where fewer than two powers of ten fall inside.
// REQUIRES: 0 < lo < hi, both finite; max_ticks >= 2.
Ticks LogTicks(double lo, double hi, int max_ticks);

// A tick label: `value` with as many decimals as `step` needs, and k, M, G or T when the
// step is at least a thousand, million, ...: (0.5, 0.25) -> "0.50", (2000, 1000) -> "2k".
std::string FormatTick(double value, double step);

// An 8-bit RGB PNG of the raster. REQUIRES: width, height > 0 and
// rgb.size() == width * height * 3.
std::vector<uint8_t> EncodePng(int width, int height, const std::vector<uint8_t>& rgb);

}  // namespace trainyard::sim
