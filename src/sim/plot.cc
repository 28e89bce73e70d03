#include "sim/plot.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

namespace trainyard::sim {
namespace {

// ---------------------------------------------------------------------------------------
// PNG (zlib does the compression and the checksums)

void PutBigEndian32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void PutChunk(std::vector<uint8_t>& png, const char (&type)[5], std::span<const uint8_t> body) {
  PutBigEndian32(png, static_cast<uint32_t>(body.size()));
  const size_t type_at = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), body.begin(), body.end());
  const std::span<const uint8_t> typed = std::span<const uint8_t>(png).subspan(type_at);
  PutBigEndian32(png, static_cast<uint32_t>(crc32_z(0, typed.data(), typed.size())));
}

}  // namespace

std::vector<uint8_t> EncodePng(int width, int height, const std::vector<uint8_t>& rgb) {
  TY_CHECK(width > 0 && height > 0);
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  TY_CHECK(rgb.size() == row_bytes * static_cast<size_t>(height));

  // Each row is preceded by its filter type; 0 (None) leaves the bytes as they are.
  std::vector<uint8_t> raw;
  raw.reserve((row_bytes + 1) * static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const auto row = rgb.begin() + static_cast<std::ptrdiff_t>(row_bytes * y);
    raw.insert(raw.end(), row, row + static_cast<std::ptrdiff_t>(row_bytes));
  }

  // compress2 takes a length of type uLong, 64 bits here: the largest raster (4096 x
  // 4096, 48 MiB) fits.
  uLongf zlib_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> zlib(zlib_size);
  const int rc = compress2(zlib.data(), &zlib_size, raw.data(), static_cast<uLong>(raw.size()),
                           Z_DEFAULT_COMPRESSION);
  TY_CHECK(rc == Z_OK);  // Z_MEM_ERROR is out of memory; Z_BUF_ERROR cannot be, given the bound
  zlib.resize(zlib_size);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> header;
  PutBigEndian32(header, static_cast<uint32_t>(width));
  PutBigEndian32(header, static_cast<uint32_t>(height));
  header.insert(header.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, filters, no interlace
  PutChunk(png, "IHDR", header);
  PutChunk(png, "IDAT", zlib);
  PutChunk(png, "IEND", {});
  return png;
}

namespace {

// ---------------------------------------------------------------------------------------
// Font: 5x9 glyphs for ASCII 32..126, drawn for this file. Rows 0..6 hold capitals and
// digits (row 6 is the baseline); rows 7..8 the descenders of g j p q y and the underscore.
// '#' is ink; rows left out are blank.

constexpr int kGlyphWidth = 5;
constexpr int kGlyphRows = 9;
constexpr int kCapHeight = 7;
constexpr int kAdvance = kGlyphWidth + 1;

// clang-format off
constexpr const char* kFont[95][kGlyphRows] = {
  {".....", ".....", ".....", ".....", ".....", ".....", "....."},  // ' '
  {"..#..", "..#..", "..#..", "..#..", "..#..", ".....", "..#.."},  // !
  {".#.#.", ".#.#.", ".#.#.", ".....", ".....", ".....", "....."},  // "
  {".#.#.", ".#.#.", "#####", ".#.#.", "#####", ".#.#.", ".#.#."},  // #
  {"..#..", ".####", "#.#..", ".###.", "..#.#", "####.", "..#.."},  // $
  {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"},  // %
  {".##..", "#..#.", "#.#..", ".#...", "#.#.#", "#..#.", ".##.#"},  // &
  {"..#..", "..#..", ".....", ".....", ".....", ".....", "....."},  // '
  {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."},  // (
  {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."},  // )
  {".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#..", "....."},  // *
  {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."},  // +
  {".....", ".....", ".....", ".....", ".....", "..##.", "...#.", "..#.."},  // ,
  {".....", ".....", ".....", ".###.", ".....", ".....", "....."},  // -
  {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."},  // .
  {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."},  // /
  {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."},  // 0
  {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."},  // 1
  {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"},  // 2
  {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."},  // 3
  {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."},  // 4
  {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."},  // 5
  {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."},  // 6
  {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."},  // 7
  {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."},  // 8
  {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."},  // 9
  {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."},  // :
  {".....", ".##..", ".##..", ".....", ".##..", "..#..", ".#..."},  // ;
  {"...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."},  // <
  {".....", ".....", "#####", ".....", "#####", ".....", "....."},  // =
  {".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."},  // >
  {".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."},  // ?
  {".###.", "#...#", "#.###", "#.#.#", "#.##.", "#....", ".###."},  // @
  {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"},  // A
  {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."},  // B
  {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."},  // C
  {"###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."},  // D
  {"#####", "#....", "#....", "####.", "#....", "#....", "#####"},  // E
  {"#####", "#....", "#....", "####.", "#....", "#....", "#...."},  // F
  {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"},  // G
  {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"},  // H
  {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."},  // I
  {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."},  // J
  {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"},  // K
  {"#....", "#....", "#....", "#....", "#....", "#....", "#####"},  // L
  {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"},  // M
  {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"},  // N
  {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."},  // O
  {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."},  // P
  {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"},  // Q
  {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"},  // R
  {".####", "#....", "#....", ".###.", "....#", "....#", "####."},  // S
  {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."},  // T
  {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."},  // U
  {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."},  // V
  {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."},  // W
  {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"},  // X
  {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."},  // Y
  {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"},  // Z
  {".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."},  // [
  {".....", "#....", ".#...", "..#..", "...#.", "....#", "....."},  // backslash
  {".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."},  // ]
  {"..#..", ".#.#.", "#...#", ".....", ".....", ".....", "....."},  // ^
  {".....", ".....", ".....", ".....", ".....", ".....", ".....", "#####"},  // _
  {".#...", "..#..", ".....", ".....", ".....", ".....", "....."},  // `
  {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"},  // a
  {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."},  // b
  {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."},  // c
  {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"},  // d
  {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."},  // e
  {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."},  // f
  {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", ".###."},  // g
  {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"},  // h
  {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."},  // i
  {"...#.", ".....", "..##.", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."},  // j
  {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."},  // k
  {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."},  // l
  {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#.#.#", "#.#.#"},  // m
  {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"},  // n
  {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."},  // o
  {".....", ".....", "####.", "#...#", "#...#", "#...#", "####.", "#....", "#...."},  // p
  {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", "....#"},  // q
  {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."},  // r
  {".....", ".....", ".####", "#....", ".###.", "....#", "####."},  // s
  {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."},  // t
  {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"},  // u
  {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."},  // v
  {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."},  // w
  {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"},  // x
  {".....", ".....", "#...#", "#...#", "#...#", "#...#", ".####", "....#", ".###."},  // y
  {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"},  // z
  {"...#.", "..#..", "..#..", ".#...", "..#..", "..#..", "...#."},  // {
  {"..#..", "..#..", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."},  // |
  {".#...", "..#..", "..#..", "...#.", "..#..", "..#..", ".#..."},  // }
  {".....", ".....", ".#...", "#.#.#", "...#.", ".....", "....."},  // ~
};
// clang-format on

constexpr bool FontIsWellFormed() {
  for (const auto& glyph : kFont) {
    for (int row = 0; row < kGlyphRows; ++row) {
      const char* bits = glyph[row];
      if (bits == nullptr) {
        if (row < kCapHeight) return false;  // a glyph is missing
        continue;
      }
      int n = 0;
      for (; bits[n] != '\0'; ++n) {
        if (bits[n] != '.' && bits[n] != '#') return false;
      }
      if (n != kGlyphWidth) return false;
    }
  }
  return true;
}
static_assert(FontIsWellFormed(), "every glyph needs 7 to 9 rows of 5 '.' or '#'");

// Maps text to the characters the font has: printable ASCII stays, any other byte or
// UTF-8 sequence becomes one '?'.
std::string ToFontText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 32 && c <= 126) {
      out.push_back(ch);
    } else if ((c & 0xC0) != 0x80) {  // not a UTF-8 continuation byte
      out.push_back('?');
    }
  }
  return out;
}

int TextWidth(std::string_view text, int scale) {
  return text.empty() ? 0 : static_cast<int>(text.size()) * kAdvance * scale - scale;
}

// `text` in the font's characters, shortened with "..." to at most max_width pixels.
std::string FitText(std::string_view text, int max_width, int scale) {
  std::string fitted = ToFontText(text);
  if (TextWidth(fitted, scale) <= max_width) return fitted;
  while (!fitted.empty() && TextWidth(fitted, scale) + TextWidth("...", scale) > max_width) {
    fitted.pop_back();
  }
  return fitted.empty() ? std::string() : fitted + "...";
}

// ---------------------------------------------------------------------------------------
// Raster

constexpr Rgb kTextColor{34, 34, 34};
constexpr Rgb kAxisColor{90, 90, 90};
constexpr Rgb kGridColor{226, 226, 226};

// Pixels [left, right) x [top, bottom).
struct Rect {
  int left = 0;
  int top = 0;
  int right = 0;
  int bottom = 0;
  int Width() const { return right - left; }
  int Height() const { return bottom - top; }
};

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width),
        height_(height),
        rgb_(static_cast<size_t>(width) * static_cast<size_t>(height) * 3, 255),
        clip_{0, 0, width, height} {}

  // Later drawing touches only pixels inside `clip` (and the canvas).
  void SetClip(const Rect& clip) {
    clip_ = {std::max(0, clip.left), std::max(0, clip.top), std::min(width_, clip.right),
             std::min(height_, clip.bottom)};
  }
  void ResetClip() { clip_ = {0, 0, width_, height_}; }
  const Rect& Clip() const { return clip_; }
  int Width() const { return width_; }

  // Mixes `color` into pixel (x, y) with the given coverage in [0, 1].
  void Blend(int x, int y, Rgb color, double coverage) {
    if (x < clip_.left || x >= clip_.right || y < clip_.top || y >= clip_.bottom) return;
    if (coverage <= 0) return;
    uint8_t* p = &rgb_[(static_cast<size_t>(y) * static_cast<size_t>(width_) + x) * 3];
    if (coverage >= 1) {
      p[0] = color.r;
      p[1] = color.g;
      p[2] = color.b;
      return;
    }
    const auto mix = [coverage](uint8_t from, uint8_t to) {
      return static_cast<uint8_t>(std::lround(from + (to - from) * coverage));
    };
    p[0] = mix(p[0], color.r);
    p[1] = mix(p[1], color.g);
    p[2] = mix(p[2], color.b);
  }

  void Fill(const Rect& r, Rgb color) {
    for (int y = std::max(r.top, clip_.top); y < std::min(r.bottom, clip_.bottom); ++y) {
      for (int x = std::max(r.left, clip_.left); x < std::min(r.right, clip_.right); ++x) {
        Blend(x, y, color, 1);
      }
    }
  }

  Image TakeImage() && { return Image{width_, height_, std::move(rgb_)}; }

 private:
  int width_;
  int height_;
  std::vector<uint8_t> rgb_;
  Rect clip_;
};

// Draws `text` (already in the font's characters) with the top of its capitals at
// (x, y). Rotated text reads upwards: its baseline runs up the screen from (x, y),
// where the top of the capitals faces left, at column x.
void DrawText(Canvas& canvas, int x, int y, std::string_view text, int scale, Rgb color,
              bool rotated = false) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& glyph = kFont[static_cast<unsigned char>(text[i]) - 32];
    const int origin = static_cast<int>(i) * kAdvance * scale;
    for (int row = 0; row < kGlyphRows; ++row) {
      if (glyph[row] == nullptr) continue;
      for (int col = 0; col < kGlyphWidth; ++col) {
        if (glyph[row][col] != '#') continue;
        const int u = origin + col * scale;  // along the text
        const int v = row * scale;           // down the glyph
        const Rect cell = rotated ? Rect{x + v, y - u - scale, x + v + scale, y - u}
                                  : Rect{x + u, y + v, x + u + scale, y + v + scale};
        canvas.Fill(cell, color);
      }
    }
  }
}

// Clips the segment to [x_min, x_max] x [y_min, y_max] (Liang-Barsky); false when
// nothing is left.
bool ClipSegment(double& x0, double& y0, double& x1, double& y1, double x_min, double y_min,
                 double x_max, double y_max) {
  const double dx = x1 - x0;
  const double dy = y1 - y0;
  double t0 = 0;
  double t1 = 1;
  const auto edge = [&](double p, double q) {
    if (p == 0) return q >= 0;
    const double r = q / p;
    if (p < 0) {
      if (r > t1) return false;
      t0 = std::max(t0, r);
    } else {
      if (r < t0) return false;
      t1 = std::min(t1, r);
    }
    return true;
  };
  if (!edge(-dx, x0 - x_min) || !edge(dx, x_max - x0) || !edge(-dy, y0 - y_min) ||
      !edge(dy, y_max - y0)) {
    return false;
  }
  const double sx = x0;
  const double sy = y0;
  x0 = sx + t0 * dx;
  y0 = sy + t0 * dy;
  x1 = sx + t1 * dx;
  y1 = sy + t1 * dy;
  return true;
}

// Draws an anti-aliased line `width` pixels thick between two points in pixel space
// (pixel (i, j) covers [i, i+1) x [j, j+1)). Each column (or row, for steep lines) is
// covered over the line's thickness measured along it, with partial pixels blended.
void DrawLine(Canvas& canvas, double x0, double y0, double x1, double y1, double width, Rgb color) {
  const Rect& clip = canvas.Clip();
  if (!ClipSegment(x0, y0, x1, y1, clip.left - width, clip.top - width, clip.right + width,
                   clip.bottom + width)) {
    return;
  }
  const bool steep = std::abs(y1 - y0) > std::abs(x1 - x0);
  if (steep) {  // walk along y instead: swap the roles of the coordinates
    std::swap(x0, y0);
    std::swap(x1, y1);
  }
  if (x0 > x1) {
    std::swap(x0, x1);
    std::swap(y0, y1);
  }
  const double slope = x1 > x0 ? (y1 - y0) / (x1 - x0) : 0;
  const double half = width / 2 * std::sqrt(1 + slope * slope);
  const int first = static_cast<int>(std::floor(x0));
  const int last = static_cast<int>(std::floor(x1));
  for (int i = first; i <= last; ++i) {
    const double centre = std::clamp(i + 0.5, x0, x1);
    const double mid = y0 + (centre - x0) * slope;
    const double lo = mid - half;
    const double hi = mid + half;
    for (int j = static_cast<int>(std::floor(lo)); j < static_cast<int>(std::ceil(hi)); ++j) {
      const double coverage = std::min(hi, j + 1.0) - std::max(lo, static_cast<double>(j));
      if (steep) {
        canvas.Blend(j, i, color, coverage);
      } else {
        canvas.Blend(i, j, color, coverage);
      }
    }
  }
}

// Draws a polyline fed one point at a time, merging the points that fall in one pixel
// column into a vertical span from their lowest to their highest y. The lines between
// columns join the last point of one column to the first of the next, so the result
// covers what the full polyline covers, in time linear in the points.
class PolylineDrawer {
 public:
  PolylineDrawer(Canvas& canvas, Rgb color, double width)
      : canvas_(canvas), color_(color), width_(width) {}

  void Add(double x, double y) {
    const auto column = static_cast<int64_t>(std::floor(x));
    if (points_ > 0 && column == column_) {
      low_ = std::min(low_, y);
      high_ = std::max(high_, y);
    } else {
      if (points_ > 0) {
        FlushColumn();
        DrawLine(canvas_, last_x_, last_y_, x, y, width_, color_);
        drew_ = true;
      }
      column_ = column;
      low_ = high_ = y;
    }
    last_x_ = x;
    last_y_ = y;
    ++points_;
  }

  // Ends the current line; a line that covered no length shows as a dot.
  void Break() {
    if (points_ == 0) return;
    FlushColumn();
    if (!drew_) {
      const int x = static_cast<int>(std::floor(last_x_));
      const int y = static_cast<int>(std::floor(last_y_));
      const int r = static_cast<int>(std::ceil(width_));
      canvas_.Fill({x - r + 1, y - r + 1, x + r + 1, y + r + 1}, color_);
    }
    points_ = 0;
    drew_ = false;
  }

 private:
  void FlushColumn() {
    if (high_ > low_) {
      const double x = static_cast<double>(column_) + 0.5;
      DrawLine(canvas_, x, low_, x, high_, width_, color_);
      drew_ = true;
    }
  }

  Canvas& canvas_;
  Rgb color_;
  double width_;
  int64_t points_ = 0;  // in the current line
  bool drew_ = false;   // whether the current line has drawn anything
  int64_t column_ = 0;
  double low_ = 0;
  double high_ = 0;
  double last_x_ = 0;
  double last_y_ = 0;
};

// ---------------------------------------------------------------------------------------
// Axes and layout

constexpr int kMinWidth = 320;
constexpr int kMinHeight = 200;
constexpr int kMaxSide = 8192;
constexpr int64_t kMaxPixels = int64_t{4096} * 4096;
constexpr double kMaxMagnitude = 1e300;

bool Placeable(double v) { return std::isfinite(v) && std::abs(v) <= kMaxMagnitude; }

// Maps values to pixel coordinates. lo and hi are in axis space (log10 of the value on a
// log axis); lo maps to pixel_lo and hi to pixel_hi.
struct Axis {
  bool log = false;
  double lo = 0;
  double hi = 1;
  double pixel_lo = 0;
  double pixel_hi = 1;
  Ticks ticks;

  bool CanPlace(double v) const { return Placeable(v) && (!log || v > 0); }
  double ToPixel(double v) const {
    const double s = log ? std::log10(v) : v;
    const double p = pixel_lo + (s - lo) / (hi - lo) * (pixel_hi - pixel_lo);
    return std::clamp(p, -1e7, 1e7);
  }
  int PixelOf(double v) const { return static_cast<int>(std::floor(ToPixel(v))); }
};

double NiceStep(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (raw <= m * magnitude * (1 + 1e-9)) return m * magnitude;
  }
  return 10 * magnitude;
}

// The multiples of step in [lo, hi], labelled.
Ticks TicksWithStep(double lo, double hi, double step) {
  Ticks ticks;
  ticks.step = step;
  const double first = std::ceil(lo / step - 1e-9);
  const double last = std::floor(hi / step + 1e-9);
  if (std::abs(first) > 1e15 || std::abs(last) > 1e15 || last - first > 1000) {
    // The range is too narrow for its magnitude to hold round values: mark the ends.
    ticks.step = hi - lo;
    ticks.values = {lo, hi};
  } else {
    for (double i = first; i <= last; ++i) {
      const double v = i * step;
      ticks.values.push_back(v == 0 ? 0 : v);  // no "-0"
    }
  }
  for (double v : ticks.values) ticks.labels.push_back(FormatTick(v, ticks.step));
  return ticks;
}

// Widens an empty range [v, v] around v.
void Widen(double& lo, double& hi, bool keep_zero_bottom) {
  if (hi - lo > 1e-200 * std::max(1.0, std::abs(lo))) return;
  if (keep_zero_bottom && lo == 0) {
    hi = 1;
    return;
  }
  const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
  lo -= d;
  hi += d;
}

// The smallest distance in pixels between consecutive ticks, and the widest label.
std::pair<double, int> TickSpacing(const Axis& axis, const Ticks& ticks, int scale) {
  double spacing = std::numeric_limits<double>::infinity();
  for (size_t i = 1; i < ticks.values.size(); ++i) {
    spacing = std::min(spacing,
                       std::abs(axis.ToPixel(ticks.values[i]) - axis.ToPixel(ticks.values[i - 1])));
  }
  int widest = 0;
  for (const std::string& label : ticks.labels) widest = std::max(widest, TextWidth(label, scale));
  return {spacing, widest};
}

struct DataRange {
  double x_lo = std::numeric_limits<double>::infinity();
  double x_hi = -std::numeric_limits<double>::infinity();
  double y_lo = std::numeric_limits<double>::infinity();
  double y_hi = -std::numeric_limits<double>::infinity();
  bool Empty() const { return x_lo > x_hi; }
};

DataRange MeasureData(const std::vector<Series>& series, bool x_log) {
  DataRange range;
  for (const Series& s : series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double x = s.x[i];
      const double y = s.y[i];
      if (!Placeable(x) || !Placeable(y) || (x_log && x <= 0)) continue;
      range.x_lo = std::min(range.x_lo, x);
      range.x_hi = std::max(range.x_hi, x);
      range.y_lo = std::min(range.y_lo, y);
      range.y_hi = std::max(range.y_hi, y);
    }
  }
  return range;
}

Status ValidateInput(const std::vector<Series>& series, const ChartOptions& options) {
  const auto size = std::to_string(options.width) + "x" + std::to_string(options.height);
  if (options.width < kMinWidth || options.width > kMaxSide) {
    return InvalidArgument("chart size " + size + ": width must be between " +
                           std::to_string(kMinWidth) + " and " + std::to_string(kMaxSide) +
                           " pixels");
  }
  if (options.height < kMinHeight || options.height > kMaxSide) {
    return InvalidArgument("chart size " + size + ": height must be between " +
                           std::to_string(kMinHeight) + " and " + std::to_string(kMaxSide) +
                           " pixels");
  }
  const int64_t pixels = int64_t{options.width} * options.height;
  if (pixels > kMaxPixels) {
    return InvalidArgument("chart size " + size + ": " + std::to_string(pixels) +
                           " pixels; the most is " + std::to_string(kMaxPixels) +
                           " (4096x4096): make the chart smaller");
  }
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    if (s.x.size() != s.y.size()) {
      return InvalidArgument("series " + std::to_string(i) + " ('" + s.label + "'): x has " +
                             std::to_string(s.x.size()) + " values and y has " +
                             std::to_string(s.y.size()) + "; they must have the same length");
    }
  }
  if (options.y_max.has_value() && !Placeable(*options.y_max)) {
    return InvalidArgument("y_max: must be a finite number, got " + std::to_string(*options.y_max));
  }
  return Status::Ok();
}

// Where everything goes, in pixels.
struct Layout {
  int scale = 1;        // of the text, lines and ticks
  int margin = 0;       // around the whole chart
  int tick_length = 0;  // outwards from the axes
  int tick_gap = 0;     // between a tick and its label
  Rect plot;            // the area the data are drawn in, inside the axes
  Axis x;
  Axis y;
  std::string title, x_label, y_label;
  std::vector<std::string> legend;  // one label per series
  int legend_left = 0;
};

int TextScale(int width, int height) { return std::max(1, std::min(width / 900, height / 500)); }

Result<Layout> BuildLayout(const std::vector<Series>& series, const ChartOptions& options) {
  Layout layout;
  const int s = layout.scale = TextScale(options.width, options.height);
  const int width = options.width;
  const int height = options.height;
  const int line = kGlyphRows * s;
  layout.margin = 10 * s;
  layout.tick_length = 5 * s;
  layout.tick_gap = 4 * s;
  const int pad = 4 * s;  // between the axes and the data's extremes

  const DataRange data = MeasureData(series, options.x_log);

  // y range
  double y_lo = data.Empty() ? 0 : data.y_lo;
  double y_hi = data.Empty() ? 1 : data.y_hi;
  if (options.y_from_zero) {
    y_lo = std::min(y_lo, 0.0);
    y_hi = std::max(y_hi, 0.0);
  }
  if (options.y_max.has_value()) {
    if (*options.y_max <= y_lo) {
      return InvalidArgument("y_max: must be above the bottom of the y axis (" +
                             FormatTick(y_lo, 0) + "), got " + FormatTick(*options.y_max, 0));
    }
    y_hi = *options.y_max;
  }
  Widen(y_lo, y_hi, options.y_from_zero);

  // x range, in axis space
  layout.x.log = options.x_log;
  double x_lo = 0;
  double x_hi = 1;
  if (!data.Empty()) {
    x_lo = options.x_log ? std::log10(data.x_lo) : data.x_lo;
    x_hi = options.x_log ? std::log10(data.x_hi) : data.x_hi;
  }
  if (options.x_log) {
    if (x_hi - x_lo < 1e-9) {
      x_lo -= 1;
      x_hi += 1;
    }
  } else {
    Widen(x_lo, x_hi, false);
  }
  layout.x.lo = x_lo;
  layout.x.hi = x_hi;

  // Vertical layout: title, plot, tick labels, x label.
  const int title_scale = 2 * s;
  layout.title = FitText(options.title, width - 2 * layout.margin, title_scale);
  int top = layout.margin + line / 2;  // room for half the top tick label
  if (!layout.title.empty()) top = layout.margin + kGlyphRows * title_scale + 8 * s;
  layout.x_label = FitText(options.x_label, width - 2 * layout.margin, s);
  int bottom = layout.margin + layout.tick_length + layout.tick_gap + line;
  if (!layout.x_label.empty()) bottom += 6 * s + line;
  layout.plot.top = top;
  layout.plot.bottom = height - bottom;

  // y ticks; without a y_max the axis runs on to the next round value.
  layout.y.pixel_lo = layout.plot.bottom - pad - 0.5;
  layout.y.pixel_hi = layout.plot.top + pad + 0.5;
  const int max_y_ticks = std::max(2, layout.plot.Height() / (40 * s) + 1);
  Ticks y_ticks = LinearTicks(y_lo, y_hi, max_y_ticks);
  if (!options.y_max.has_value() && y_ticks.step > 0) {
    const double step = y_ticks.step;
    y_lo = std::floor(y_lo / step + 1e-9) * step;
    y_hi = std::ceil(y_hi / step - 1e-9) * step;
    y_ticks = TicksWithStep(y_lo, y_hi, step);
  }
  layout.y.lo = y_lo;
  layout.y.hi = y_hi;
  layout.y.ticks = std::move(y_ticks);

  // Horizontal layout: y label, y tick labels, plot, legend.
  layout.y_label = FitText(options.y_label, layout.plot.Height(), s);
  int left = layout.margin + layout.tick_length + layout.tick_gap;
  for (const std::string& label : layout.y.ticks.labels) {
    left =
        std::max(left, layout.margin + TextWidth(label, s) + layout.tick_gap + layout.tick_length);
  }
  if (!layout.y_label.empty()) left += line + 6 * s;
  int right = layout.margin + 3 * kAdvance * s;  // room for half the last x tick label
  if (!series.empty()) {
    int widest = 0;
    for (size_t i = 0; i < series.size(); ++i) {
      const std::string& label = series[i].label;
      layout.legend.push_back(
          FitText(label.empty() ? "series " + std::to_string(i + 1) : label, width / 4, s));
      widest = std::max(widest, TextWidth(layout.legend.back(), s));
    }
    right = layout.margin + 16 * s + 18 * s + 6 * s + widest;
  }
  layout.plot.left = left;
  layout.plot.right = width - right;
  layout.legend_left = layout.plot.right + 16 * s;
  layout.x.pixel_lo = layout.plot.left + pad + 0.5;
  layout.x.pixel_hi = layout.plot.right - pad - 0.5;

  // x ticks: as many as fit without their labels touching.
  for (int max_ticks = std::max(2, layout.plot.Width() / (70 * s) + 1);; --max_ticks) {
    layout.x.ticks = options.x_log ? LogTicks(std::pow(10.0, x_lo), std::pow(10.0, x_hi), max_ticks)
                                   : LinearTicks(x_lo, x_hi, max_ticks);
    const auto [spacing, widest] = TickSpacing(layout.x, layout.x.ticks, s);
    if (max_ticks == 2 || spacing >= widest + 12 * s) break;
  }
  return layout;
}

void DrawGrid(Canvas& canvas, const Layout& layout) {
  const Rect& plot = layout.plot;
  for (double v : layout.y.ticks.values) {
    const int y = layout.y.PixelOf(v);
    canvas.Fill({plot.left, y, plot.right, y + 1}, kGridColor);
  }
  for (double v : layout.x.ticks.values) {
    const int x = layout.x.PixelOf(v);
    canvas.Fill({x, plot.top, x + 1, plot.bottom}, kGridColor);
  }
}

void DrawSeries(Canvas& canvas, const Layout& layout, const Series& s, Rgb color, bool step) {
  canvas.SetClip(layout.plot);
  PolylineDrawer line(canvas, color, 2.0 * layout.scale);
  bool have_previous = false;
  double previous_y = 0;
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!layout.x.CanPlace(s.x[i]) || !Placeable(s.y[i])) {
      line.Break();
      have_previous = false;
      continue;
    }
    const double x = layout.x.ToPixel(s.x[i]);
    const double y = layout.y.ToPixel(s.y[i]);
    if (step && have_previous) line.Add(x, previous_y);
    line.Add(x, y);
    previous_y = y;
    have_previous = true;
  }
  line.Break();
  canvas.ResetClip();
}

void DrawAxes(Canvas& canvas, const Layout& layout) {
  const int s = layout.scale;
  const Rect& plot = layout.plot;
  const int line = kGlyphRows * s;
  canvas.Fill({plot.left - s, plot.top, plot.left, plot.bottom + s}, kAxisColor);
  canvas.Fill({plot.left - s, plot.bottom, plot.right, plot.bottom + s}, kAxisColor);

  const int y_tick_left = plot.left - s - layout.tick_length;
  for (size_t i = 0; i < layout.y.ticks.values.size(); ++i) {
    const int y = layout.y.PixelOf(layout.y.ticks.values[i]);
    canvas.Fill({y_tick_left, y, plot.left - s, y + s}, kAxisColor);
    const std::string& label = layout.y.ticks.labels[i];
    DrawText(canvas, y_tick_left - layout.tick_gap - TextWidth(label, s), y - (kCapHeight * s) / 2,
             label, s, kTextColor);
  }

  const int x_tick_bottom = plot.bottom + s + layout.tick_length;
  for (double v : layout.x.ticks.minor) {
    const int x = layout.x.PixelOf(v);
    canvas.Fill({x, plot.bottom + s, x + s, x_tick_bottom - 2 * s}, kAxisColor);
  }
  for (size_t i = 0; i < layout.x.ticks.values.size(); ++i) {
    const int x = layout.x.PixelOf(layout.x.ticks.values[i]);
    canvas.Fill({x, plot.bottom + s, x + s, x_tick_bottom}, kAxisColor);
    const std::string& label = layout.x.ticks.labels[i];
    const int w = TextWidth(label, s);
    const int text_x = std::clamp(x - w / 2, 0, std::max(0, canvas.Width() - w));
    DrawText(canvas, text_x, x_tick_bottom + layout.tick_gap, label, s, kTextColor);
  }

  if (!layout.x_label.empty()) {
    const int w = TextWidth(layout.x_label, s);
    const int x = std::clamp((plot.left + plot.right - w) / 2, layout.margin,
                             std::max(layout.margin, canvas.Width() - layout.margin - w));
    DrawText(canvas, x, x_tick_bottom + layout.tick_gap + line + 6 * s, layout.x_label, s,
             kTextColor);
  }
  if (!layout.y_label.empty()) {
    const int w = TextWidth(layout.y_label, s);
    DrawText(canvas, layout.margin, (plot.top + plot.bottom + w) / 2, layout.y_label, s, kTextColor,
             /*rotated=*/true);
  }
}

void DrawTitle(Canvas& canvas, const Layout& layout, int width) {
  if (layout.title.empty()) return;
  const int scale = 2 * layout.scale;
  const int w = TextWidth(layout.title, scale);
  DrawText(canvas, std::max(layout.margin, (width - w) / 2), layout.margin, layout.title, scale,
           kTextColor);
}

void DrawLegend(Canvas& canvas, const Layout& layout, int height) {
  const int s = layout.scale;
  const int row = kGlyphRows * s + 6 * s;
  int y = layout.plot.top;
  for (size_t i = 0; i < layout.legend.size(); ++i, y += row) {
    if (y + row > height) break;  // more series than rows: the rest go unlisted
    const int mid = y + (kCapHeight * s) / 2;
    canvas.Fill({layout.legend_left, mid - 2 * s, layout.legend_left + 18 * s, mid + 2 * s},
                kSeriesColors[i % kSeriesColors.size()]);
    DrawText(canvas, layout.legend_left + 24 * s, y, layout.legend[i], s, kTextColor);
  }
}

// A failed write of `path`, coded by its cause: a path that cannot be written is the
// caller's to fix; a full disk is a limit; anything else may pass.
Status WriteError(const std::string& path, int error) {
  std::string message =
      "cannot write chart to '" + path + "': " + std::generic_category().message(error);
  switch (error) {
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case EACCES:
    case EROFS:
    case ENAMETOOLONG:
      return InvalidArgument(std::move(message));
    case ENOSPC:
    case EDQUOT:
      return ResourceExhausted(std::move(message));
    default:
      return Unavailable(std::move(message));
  }
}

}  // namespace

std::string FormatTick(double value, double step) {
  step = std::abs(step);
  if (step == 0) step = std::abs(value);
  if (std::abs(value) <= step * 1e-9) value = 0;
  char buffer[64];
  if (step != 0 && (step < 1e-6 || step >= 1e15)) {
    std::snprintf(buffer, sizeof buffer, "%.4g", value);
    return buffer;
  }
  double unit = 1;
  const char* suffix = "";
  struct Unit {
    double size;
    const char* suffix;
  };
  static constexpr Unit kUnits[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const Unit& u : kUnits) {
    if (step >= u.size) {
      unit = u.size;
      suffix = u.suffix;
      break;
    }
  }
  // As many decimals as the step needs to be written exactly.
  const double scaled_step = step / unit;
  int decimals = 0;
  for (double p = 1; decimals < 9; ++decimals, p *= 10) {
    const double v = scaled_step * p;
    if (std::abs(v - std::round(v)) <= 1e-6 * std::max(1.0, v)) break;
  }
  if (value == 0 && unit > 1) return "0";  // not "0k"
  std::snprintf(buffer, sizeof buffer, "%.*f%s", decimals, value / unit, suffix);
  return buffer;
}

Ticks LinearTicks(double lo, double hi, int max_ticks) {
  TY_CHECK(lo < hi && max_ticks >= 2);
  return TicksWithStep(lo, hi, NiceStep((hi - lo) / (max_ticks - 1)));
}

Ticks LogTicks(double lo, double hi, int max_ticks) {
  TY_CHECK(0 < lo && lo < hi && max_ticks >= 2);
  const int first = static_cast<int>(std::ceil(std::log10(lo) - 1e-9));
  const int last = static_cast<int>(std::floor(std::log10(hi) + 1e-9));
  const int decades = last - first + 1;
  if (decades < 2) return LinearTicks(lo, hi, max_ticks);
  // Too many decades to label: every stride-th one, at exponents that are multiples of
  // the stride (1, 1k, 1M rather than 10, 10k, 10M), keeping at least two.
  const auto on_stride = [](int k, int stride) { return ((k % stride) + stride) % stride == 0; };
  int stride = 1;
  for (int candidate : {1, 2, 3, 5, 10, 20, 50, 100}) {
    int labelled = 0;
    for (int k = first; k <= last; ++k) labelled += on_stride(k, candidate) ? 1 : 0;
    if (labelled < 2) break;
    stride = candidate;
    if (labelled <= max_ticks) break;
  }
  Ticks ticks;
  for (int k = first; k <= last; ++k) {
    const double v = std::pow(10.0, k);
    if (on_stride(k, stride)) {
      ticks.values.push_back(v);
      ticks.labels.push_back(FormatTick(v, v));
    }
  }
  if (stride == 1) {
    for (int k = first - 1; k <= last; ++k) {
      for (int m = 2; m <= 9; ++m) {
        const double v = m * std::pow(10.0, k);
        if (v >= lo && v <= hi) ticks.minor.push_back(v);
      }
    }
  }
  return ticks;
}

Result<Image> RenderLineChart(const std::vector<Series>& series, const ChartOptions& options) {
  TY_RETURN_IF_ERROR(ValidateInput(series, options));
  TY_ASSIGN_OR_RETURN(const Layout layout, BuildLayout(series, options));
  Canvas canvas(options.width, options.height);
  DrawGrid(canvas, layout);
  for (size_t i = 0; i < series.size(); ++i) {
    DrawSeries(canvas, layout, series[i], kSeriesColors[i % kSeriesColors.size()], options.step);
  }
  DrawAxes(canvas, layout);
  DrawTitle(canvas, layout, options.width);
  DrawLegend(canvas, layout, options.height);
  return std::move(canvas).TakeImage();
}

Status WriteLineChartPng(const std::string& path, const std::vector<Series>& series,
                         const ChartOptions& options) {
  TY_ASSIGN_OR_RETURN(const Image image, RenderLineChart(series, options));
  const std::vector<uint8_t> png = EncodePng(image.width, image.height, image.rgb);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return WriteError(path, errno);
  const bool written = std::fwrite(png.data(), 1, png.size(), file) == png.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written) return WriteError(path, write_errno);
  if (!closed) return WriteError(path, errno);
  return Status::Ok();
}

}  // namespace trainyard::sim
