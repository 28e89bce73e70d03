#include "sim/plot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace trainyard::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------
// A PNG reader for what EncodePng writes: checks the signature, the chunks (IHDR first,
// IEND last, every CRC), IHDR's fields, inflates the IDAT stream with zlib (which checks
// the stream's Adler-32) and undoes filter type 0, the only one EncodePng uses.

struct DecodedPng {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

uint32_t BigEndian32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         b[at + 3];
}

Result<std::vector<uint8_t>> Inflate(const std::vector<uint8_t>& zlib, size_t expected) {
  std::vector<uint8_t> out(expected + 1);  // one more: a longer stream does not fit
  uLongf size = out.size();
  const int rc = uncompress(out.data(), &size, zlib.data(), zlib.size());
  if (rc != Z_OK) return DataLoss("IDAT does not inflate: zlib error " + std::to_string(rc));
  out.resize(size);
  return out;
}

Result<DecodedPng> DecodePng(const std::vector<uint8_t>& png) {
  const std::vector<uint8_t> signature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (png.size() < 8 || !std::equal(signature.begin(), signature.end(), png.begin())) {
    return DataLoss("bad signature");
  }
  DecodedPng result;
  std::vector<uint8_t> idat;
  std::vector<std::string> types;
  for (size_t at = 8; at < png.size();) {
    if (at + 12 > png.size()) return DataLoss("truncated chunk");
    const uint32_t length = BigEndian32(png, at);
    if (at + 12 + length > png.size()) return DataLoss("truncated chunk body");
    const std::string type(png.begin() + at + 4, png.begin() + at + 8);
    if (crc32_z(0, png.data() + at + 4, length + 4) != BigEndian32(png, at + 8 + length)) {
      return DataLoss(type + ": bad CRC");
    }
    const auto body = png.begin() + static_cast<std::ptrdiff_t>(at + 8);
    if (type == "IHDR") {
      if (length != 13) return DataLoss("IHDR length");
      result.width = static_cast<int>(BigEndian32(png, at + 8));
      result.height = static_cast<int>(BigEndian32(png, at + 12));
      if (png[at + 16] != 8 || png[at + 17] != 2 || png[at + 18] != 0 || png[at + 19] != 0 ||
          png[at + 20] != 0) {
        return DataLoss("not 8-bit RGB, deflate, filter method 0, not interlaced");
      }
    } else if (type == "IDAT") {
      idat.insert(idat.end(), body, body + length);
    } else if (type == "IEND" && length != 0) {
      return DataLoss("IEND with a body");
    }
    types.push_back(type);
    at += 12 + length;
  }
  if (types.empty() || types.front() != "IHDR" || types.back() != "IEND") {
    return DataLoss("chunks must run from IHDR to IEND");
  }
  const size_t row = static_cast<size_t>(result.width) * 3;
  TY_ASSIGN_OR_RETURN(const std::vector<uint8_t> raw, Inflate(idat, (row + 1) * result.height));
  if (raw.size() != (row + 1) * result.height) return DataLoss("wrong amount of image data");
  for (int y = 0; y < result.height; ++y) {
    const auto line = raw.begin() + static_cast<std::ptrdiff_t>((row + 1) * y);
    if (*line != 0) return DataLoss("unexpected filter type");
    result.rgb.insert(result.rgb.end(), line + 1, line + 1 + static_cast<std::ptrdiff_t>(row));
  }
  return result;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

int CountPixels(const Image& image, Rgb color) {
  int n = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) n += image.At(x, y) == color ? 1 : 0;
  }
  return n;
}

Image Render(const std::vector<Series>& series, const ChartOptions& options = {}) {
  Result<Image> image = RenderLineChart(series, options);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? *image : Image{};
}

// ---------------------------------------------------------------------------------------
// PNG

TEST(PlotTest, PngRoundTripsPixelsExactly) {
  const int width = 37;
  const int height = 23;
  std::vector<uint8_t> rgb;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      rgb.insert(rgb.end(), {static_cast<uint8_t>(x * 7), static_cast<uint8_t>(y * 11),
                             static_cast<uint8_t>((x ^ y) * 3)});
    }
  }
  Result<DecodedPng> png = DecodePng(EncodePng(width, height, rgb));
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->width, width);
  EXPECT_EQ(png->height, height);
  EXPECT_EQ(png->rgb, rgb);
}

TEST(PlotTest, PngOfOnePixel) {
  const std::vector<uint8_t> rgb = {1, 2, 3};
  Result<DecodedPng> png = DecodePng(EncodePng(1, 1, rgb));
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->rgb, rgb);
}

TEST(PlotTest, NoiseBarelyGrowsAndFlatAreasAreCompressed) {
  std::mt19937 random(7);
  const int width = 300;
  const int height = 200;
  std::vector<uint8_t> noise(width * height * 3);
  for (uint8_t& byte : noise) byte = static_cast<uint8_t>(random());
  const std::vector<uint8_t> noisy = EncodePng(width, height, noise);
  Result<DecodedPng> png = DecodePng(noisy);
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->rgb, noise);
  EXPECT_LT(noisy.size(), noise.size() + noise.size() / 100 + 100);

  const std::vector<uint8_t> white(960 * 540 * 3, 255);
  const std::vector<uint8_t> flat = EncodePng(960, 540, white);
  Result<DecodedPng> flat_png = DecodePng(flat);
  ASSERT_TRUE(flat_png.ok()) << flat_png.status().ToString();
  EXPECT_EQ(flat_png->rgb, white);
  EXPECT_LT(flat.size(), 15'000u);  // 1.5 MB of pixels
}

TEST(PlotTest, ChartPngDecodesToTheRenderedImage) {
  const std::vector<Series> series = {{"a", {0, 1, 2, 3}, {1, 3, 2, 4}},
                                      {"b", {0, 1, 2, 3}, {2, 1, 4, 3}}};
  ChartOptions options;
  options.title = "Round trip";
  const Image image = Render(series, options);
  const std::string path = TempPath("plot_test_round_trip.png");
  ASSERT_TRUE(WriteLineChartPng(path, series, options).ok());
  Result<DecodedPng> png = DecodePng(ReadFile(path));
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->width, 960);
  EXPECT_EQ(png->height, 540);
  EXPECT_EQ(png->rgb, image.rgb);
}

// A second reader, in Python (Debian's python3 and its zlib module), reads what
// EncodePng writes: a check of the chunk layout that does not share DecodePng's code.
TEST(PlotTest, PythonZlibReadsThePng) {
  if (!std::filesystem::exists("/usr/bin/python3") ||
      std::system("/usr/bin/python3 -c 'import zlib' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no /usr/bin/python3 with zlib";
  }
  std::mt19937 random(11);
  const int width = 400;
  const int height = 300;
  std::vector<uint8_t> rgb(width * height * 3, 255);
  for (size_t i = 0; i < rgb.size(); ++i) {  // flat areas, runs and noise
    if ((i / 3000) % 3 == 1) rgb[i] = static_cast<uint8_t>(random());
    if ((i / 3000) % 3 == 2) rgb[i] = static_cast<uint8_t>(i / 7);
  }
  const std::string png_path = TempPath("plot_test_python.png");
  const std::string raw_path = TempPath("plot_test_python.raw");
  const std::string script_path = TempPath("plot_test_python.py");
  {
    const std::vector<uint8_t> png = EncodePng(width, height, rgb);
    std::ofstream(png_path, std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
    std::ofstream(script_path) << R"(import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n'
at, idat, size = 8, b'', None
while at < len(data):
    n, kind = struct.unpack('>I4s', data[at:at + 8])
    body = data[at + 8:at + 8 + n]
    assert zlib.crc32(kind + body) == struct.unpack('>I', data[at + 8 + n:at + 12 + n])[0]
    if kind == b'IHDR':
        size = struct.unpack('>II', body[:8])
    if kind == b'IDAT':
        idat += body
    at += 12 + n
w, h = size
raw = zlib.decompress(idat)
assert len(raw) == h * (1 + 3 * w), len(raw)
rows = [raw[y * (1 + 3 * w):(y + 1) * (1 + 3 * w)] for y in range(h)]
assert all(r[0] == 0 for r in rows)
open(sys.argv[2], 'wb').write(b''.join(r[1:] for r in rows))
print(w, h)
)";
  }
  const std::string command =
      "/usr/bin/python3 " + script_path + " " + png_path + " " + raw_path + " >/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  EXPECT_EQ(ReadFile(raw_path), rgb);
}

// ---------------------------------------------------------------------------------------
// Ticks

TEST(PlotTest, LinearTicksAreRound) {
  const Ticks quarters = LinearTicks(0, 1, 5);
  EXPECT_THAT(quarters.values, ElementsAre(0, 0.25, 0.5, 0.75, 1));
  EXPECT_THAT(quarters.labels, ElementsAre("0.00", "0.25", "0.50", "0.75", "1.00"));

  const Ticks thousands = LinearTicks(0, 4300, 6);
  EXPECT_THAT(thousands.labels, ElementsAre("0", "1k", "2k", "3k", "4k"));

  const Ticks inside = LinearTicks(-3.7, 12.2, 5);
  EXPECT_THAT(inside.values, ElementsAre(0, 5, 10));

  const Ticks negative = LinearTicks(-1, 0, 3);
  EXPECT_THAT(negative.labels, ElementsAre("-1.0", "-0.5", "0.0"));  // no "-0.0"
}

TEST(PlotTest, TickLabelsUseUnitSuffixes) {
  EXPECT_EQ(FormatTick(2500, 2500), "2.5k");
  EXPECT_EQ(FormatTick(7500, 2500), "7.5k");
  EXPECT_EQ(FormatTick(3e6, 1e6), "3M");
  EXPECT_EQ(FormatTick(1500, 500), "1500");
  EXPECT_EQ(FormatTick(0.001, 0.001), "0.001");
  EXPECT_EQ(FormatTick(4, 2), "4");
}

TEST(PlotTest, LogTicksAreDecades) {
  const Ticks decades = LogTicks(1, 1e6, 10);
  EXPECT_THAT(decades.labels, ElementsAre("1", "10", "100", "1k", "10k", "100k", "1M"));
  EXPECT_EQ(decades.minor.size(), 6u * 8u);

  const Ticks thinned = LogTicks(1e-3, 1e9, 5);
  EXPECT_THAT(thinned.labels, ElementsAre("0.001", "1", "1k", "1M", "1G"));
  EXPECT_TRUE(thinned.minor.empty());

  const Ticks narrow = LogTicks(2, 8, 4);  // no power of ten inside: linear ticks
  EXPECT_THAT(narrow.values, ElementsAre(2, 4, 6, 8));
}

// ---------------------------------------------------------------------------------------
// Charts

TEST(PlotTest, TwoSeriesShowBothPaletteColours) {
  std::vector<double> x;
  std::vector<double> up;
  std::vector<double> down;
  for (int i = 0; i <= 100; ++i) {
    x.push_back(i);
    up.push_back(i / 100.0);
    down.push_back(1 - i / 100.0);
  }
  const Image with_lines = Render({{"up", x, up}, {"down", x, down}});
  const Image legend_only = Render({{"up", {}, {}}, {"down", {}, {}}});
  ASSERT_EQ(with_lines.width, 960);
  for (int i = 0; i < 2; ++i) {
    // A line across most of the plot covers several hundred pixels in full.
    EXPECT_GT(CountPixels(with_lines, kSeriesColors[i]),
              CountPixels(legend_only, kSeriesColors[i]) + 500)
        << "series " << i;
  }
  EXPECT_EQ(with_lines.At(0, 0), (Rgb{255, 255, 255}));
}

TEST(PlotTest, EmptySinglePointAndNonFiniteValuesAreHandled) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Image empty = Render({{"s", {}, {}}});
  const int legend = CountPixels(empty, kSeriesColors[0]);
  EXPECT_GT(legend, 0);

  // No series at all, or only points that cannot be placed: axes, no lines.
  EXPECT_EQ(Render({}).width, 960);
  EXPECT_EQ(Render({{"s", {nan, 1, inf, 2}, {1, nan, 2, -inf}}}).rgb, empty.rgb);

  // One point shows as a dot.
  EXPECT_GT(CountPixels(Render({{"s", {5}, {3}}}), kSeriesColors[0]), legend);

  // NaN in the middle breaks the line; the rest still draws.
  const Image broken = Render({{"s", {0, 1, 2, 3, 4}, {1, 2, nan, 2, 1}}});
  EXPECT_GT(CountPixels(broken, kSeriesColors[0]), legend + 200);

  // Huge but finite values do not overflow the drawing.
  EXPECT_EQ(Render({{"s", {0, 1, 2}, {-1e300, 1e300, 0}}}).width, 960);
  ChartOptions clipped;
  clipped.y_max = 1;
  EXPECT_EQ(Render({{"s", {0, 1, 2}, {0, 1e200, 0.5}}}, clipped).width, 960);
}

TEST(PlotTest, StepAndLogAxesRender) {
  ChartOptions options;
  options.x_log = true;
  options.step = true;
  options.y_max = 1;
  // x = 0 cannot be placed on a log axis and is skipped.
  const Image cdf = Render({{"jct", {0, 10, 100, 1000, 1e5}, {0, 0.2, 0.5, 0.9, 1}}}, options);
  EXPECT_GT(CountPixels(cdf, kSeriesColors[0]),
            CountPixels(Render({{"jct", {}, {}}}, options), kSeriesColors[0]) + 300);
}

TEST(PlotTest, ManySeriesCycleThePalette) {
  std::vector<Series> series;
  for (int i = 0; i < 10; ++i) {
    series.push_back({"policy " + std::to_string(i), {0, 1}, {double(i), double(i + 1)}});
  }
  const Image image = Render(series);
  for (const Rgb& color : kSeriesColors) EXPECT_GT(CountPixels(image, color), 0);
}

TEST(PlotTest, MillionsOfPointsRender) {
  // Noise over a trend: every column holds ~1000 points spanning a band.
  std::mt19937 random(3);
  std::uniform_real_distribution<double> noise(-0.1, 0.1);
  std::vector<Series> series(4);
  for (int s = 0; s < 4; ++s) {
    series[s].label = "series " + std::to_string(s);
    for (int i = 0; i < 1'000'000; ++i) {
      series[s].x.push_back(i * 1e-3);
      series[s].y.push_back(s + std::sin(i * 1e-5) + noise(random));
    }
  }
  const std::string path = TempPath("plot_test_million.png");
  ASSERT_TRUE(WriteLineChartPng(path, series, {}).ok());
  Result<DecodedPng> png = DecodePng(ReadFile(path));
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  Image image{png->width, png->height, png->rgb};
  for (int s = 0; s < 4; ++s) EXPECT_GT(CountPixels(image, kSeriesColors[s]), 5000);
}

// ---------------------------------------------------------------------------------------
// Errors

TEST(PlotTest, UnwritablePathIsAnErrorNamingIt) {
  const std::string path = "/nonexistent-trainyard-dir/chart.png";
  const Status status = WriteLineChartPng(path, {{"s", {0, 1}, {0, 1}}}, {});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("No such file or directory"));
}

TEST(PlotTest, SizesOutOfRangeAreRejected) {
  ChartOptions huge;
  huge.width = 100'000;
  Result<Image> wide = RenderLineChart({}, huge);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(wide.status().message(), HasSubstr("100000x540: width must be between 320 and 8192"));

  ChartOptions square;
  square.width = 8000;
  square.height = 8000;
  Result<Image> area = RenderLineChart({}, square);
  ASSERT_FALSE(area.ok());
  EXPECT_THAT(area.status().message(), HasSubstr("64000000 pixels; the most is 16777216"));

  ChartOptions tiny;
  tiny.height = 10;
  EXPECT_THAT(RenderLineChart({}, tiny).status().message(), HasSubstr("height must be between"));

  ChartOptions negative;
  negative.width = -5;
  EXPECT_FALSE(RenderLineChart({}, negative).ok());
}

TEST(PlotTest, BadSeriesAndYMaxAreRejected) {
  Result<Image> mismatched = RenderLineChart({{"util", {0, 1, 2}, {0, 1}}}, {});
  ASSERT_FALSE(mismatched.ok());
  EXPECT_THAT(mismatched.status().message(),
              HasSubstr("series 0 ('util'): x has 3 values and y has 2"));

  ChartOptions below;
  below.y_max = -1;
  EXPECT_THAT(RenderLineChart({{"s", {0, 1}, {0, 1}}}, below).status().message(),
              HasSubstr("y_max: must be above the bottom of the y axis (0), got -1"));

  ChartOptions not_finite;
  not_finite.y_max = std::numeric_limits<double>::infinity();
  EXPECT_THAT(RenderLineChart({}, not_finite).status().message(), HasSubstr("y_max"));
}

TEST(PlotTest, MinimumSizeChartRenders) {
  ChartOptions options;
  options.width = 320;
  options.height = 200;
  options.title = "A title far too long to fit across a chart only three hundred pixels wide";
  options.x_label = "time (h)";
  options.y_label = "GPU utilisation";
  const Image image = Render({{"a policy with a very long name indeed", {0, 1}, {0, 1}}}, options);
  EXPECT_EQ(image.width, 320);
  EXPECT_EQ(image.height, 200);
}

}  // namespace
}  // namespace trainyard::sim
