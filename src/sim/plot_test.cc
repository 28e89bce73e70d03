#include "sim/plot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// ---------------------------------------------------------------------------------------
// An independent PNG reader for what EncodePng writes: checks the signature and every
// chunk's CRC, inflates the zlib stream (stored and fixed-Huffman blocks; EncodePng uses
// no others), checks the Adler-32 and undoes filter type 0.

struct DecodedPng {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
  std::set<int> block_types;  // deflate BTYPE values seen
};

class BitReader {
 public:
  explicit BitReader(const std::vector<uint8_t>& data) : data_(data) {}
  bool Overrun() const { return overrun_; }
  uint32_t Bit() {
    if (pos_ >= data_.size() * 8) {
      overrun_ = true;
      return 0;
    }
    const uint32_t bit = (data_[pos_ / 8] >> (pos_ % 8)) & 1u;
    ++pos_;
    return bit;
  }
  // Extra bits and header fields: least significant bit first.
  uint32_t Bits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) v |= Bit() << i;
    return v;
  }
  // Huffman codes: most significant bit first.
  uint32_t Code(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 1) | Bit();
    return v;
  }
  void AlignToByte() { pos_ = (pos_ + 7) / 8 * 8; }
  size_t BytePosition() const { return pos_ / 8; }

 private:
  const std::vector<uint8_t>& data_;
  size_t pos_ = 0;
  bool overrun_ = false;
};

constexpr std::array<int, 29> kLengthBase = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
                                             15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
                                             67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::array<int, 29> kLengthExtra = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                              2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr std::array<int, 30> kDistanceBase = {
    1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr std::array<int, 30> kDistanceExtra = {0, 0, 0,  0,  1,  1,  2,  2,  3,  3,
                                                4, 4, 5,  5,  6,  6,  7,  7,  8,  8,
                                                9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

// RFC 1951 3.2.6: the fixed literal/length code.
int DecodeFixedSymbol(BitReader& in) {
  uint32_t code = in.Code(7);
  if (code <= 23) return 256 + static_cast<int>(code);
  code = (code << 1) | in.Bit();
  if (code >= 0x30 && code <= 0xBF) return static_cast<int>(code - 0x30);
  if (code >= 0xC0 && code <= 0xC7) return 280 + static_cast<int>(code - 0xC0);
  code = (code << 1) | in.Bit();
  if (code >= 0x190 && code <= 0x1FF) return 144 + static_cast<int>(code - 0x190);
  return -1;
}

Result<std::vector<uint8_t>> Inflate(const std::vector<uint8_t>& zlib, std::set<int>& types) {
  if (zlib.size() < 6) return DataLoss("zlib stream too short");
  if (zlib[0] != 0x78 || ((zlib[0] << 8) | zlib[1]) % 31 != 0 || (zlib[1] & 0x20) != 0) {
    return DataLoss("bad zlib header");
  }
  std::vector<uint8_t> body(zlib.begin() + 2, zlib.end());
  BitReader in(body);
  std::vector<uint8_t> out;
  for (bool last = false; !last;) {
    last = in.Bits(1) == 1;
    const int type = static_cast<int>(in.Bits(2));
    types.insert(type);
    if (type == 0) {
      in.AlignToByte();
      const uint32_t length = in.Bits(16);
      const uint32_t complement = in.Bits(16);
      if ((length ^ 0xFFFF) != complement) return DataLoss("stored block: LEN != ~NLEN");
      for (uint32_t i = 0; i < length; ++i) out.push_back(static_cast<uint8_t>(in.Bits(8)));
    } else if (type == 1) {
      for (;;) {
        const int symbol = DecodeFixedSymbol(in);
        if (symbol < 0 || symbol > 285 || in.Overrun()) return DataLoss("bad literal/length");
        if (symbol < 256) {
          out.push_back(static_cast<uint8_t>(symbol));
          continue;
        }
        if (symbol == 256) break;
        const int li = symbol - 257;
        const int length = kLengthBase[li] + static_cast<int>(in.Bits(kLengthExtra[li]));
        const int di = static_cast<int>(in.Code(5));
        if (di >= 30) return DataLoss("bad distance code");
        const size_t distance = kDistanceBase[di] + in.Bits(kDistanceExtra[di]);
        if (distance > out.size()) return DataLoss("distance reaches before the start");
        for (int i = 0; i < length; ++i) out.push_back(out[out.size() - distance]);
      }
    } else {
      return DataLoss("unexpected block type " + std::to_string(type));
    }
    if (in.Overrun()) return DataLoss("deflate stream overrun");
  }
  in.AlignToByte();
  const size_t at = in.BytePosition();
  if (at + 4 != body.size()) return DataLoss("trailing bytes after the deflate stream");
  const uint32_t adler = (uint32_t{body[at]} << 24) | (uint32_t{body[at + 1]} << 16) |
                         (uint32_t{body[at + 2]} << 8) | body[at + 3];
  if (adler != Adler32(out)) return DataLoss("Adler-32 mismatch");
  return out;
}

uint32_t BigEndian32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         b[at + 3];
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
    const std::span<const uint8_t> typed(png.data() + at + 4, length + 4);
    if (Crc32(typed) != BigEndian32(png, at + 8 + length)) return DataLoss(type + ": bad CRC");
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
    }
    types.push_back(type);
    at += 12 + length;
  }
  if (types.empty() || types.front() != "IHDR" || types.back() != "IEND") {
    return DataLoss("chunks must run from IHDR to IEND");
  }
  TY_ASSIGN_OR_RETURN(const std::vector<uint8_t> raw, Inflate(idat, result.block_types));
  const size_t row = static_cast<size_t>(result.width) * 3;
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
// Checksums

TEST(PlotTest, Crc32MatchesKnownVectors) {
  EXPECT_EQ(Crc32(Bytes("")), 0u);
  EXPECT_EQ(Crc32(Bytes("123456789")), 0xCBF43926u);
  EXPECT_EQ(Crc32(Bytes("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
  EXPECT_EQ(Crc32(Bytes("IEND")), 0xAE426082u);  // every PNG ends with it
  EXPECT_EQ(Crc32(Bytes("56789"), Crc32(Bytes("1234"))), 0xCBF43926u);
}

TEST(PlotTest, Adler32MatchesKnownVectors) {
  EXPECT_EQ(Adler32(Bytes("")), 1u);
  EXPECT_EQ(Adler32(Bytes("Wikipedia")), 0x11E60398u);
  EXPECT_EQ(Adler32(Bytes("123456789")), 0x091E01DEu);
  EXPECT_EQ(Adler32(Bytes("6789"), Adler32(Bytes("12345"))), 0x091E01DEu);
  // Long enough to need the modulo many times: a million 0xFF bytes.
  const std::vector<uint8_t> ones(1'000'000, 0xFF);
  uint32_t a = 1;
  uint32_t b = 0;
  for (uint8_t byte : ones) {
    a = (a + byte) % 65521;
    b = (b + a) % 65521;
  }
  EXPECT_EQ(Adler32(ones), (b << 16) | a);
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

TEST(PlotTest, NoiseIsStoredAndFlatAreasAreCompressed) {
  std::mt19937 random(7);
  const int width = 300;
  const int height = 200;
  std::vector<uint8_t> noise(width * height * 3);
  for (uint8_t& byte : noise) byte = static_cast<uint8_t>(random());
  const std::vector<uint8_t> noisy = EncodePng(width, height, noise);
  Result<DecodedPng> png = DecodePng(noisy);
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->rgb, noise);
  EXPECT_THAT(png->block_types, ElementsAre(0));  // fixed codes would only grow noise
  EXPECT_LT(noisy.size(), noise.size() + noise.size() / 100 + 100);

  const std::vector<uint8_t> white(960 * 540 * 3, 255);
  const std::vector<uint8_t> flat = EncodePng(960, 540, white);
  Result<DecodedPng> flat_png = DecodePng(flat);
  ASSERT_TRUE(flat_png.ok()) << flat_png.status().ToString();
  EXPECT_EQ(flat_png->rgb, white);
  EXPECT_THAT(flat_png->block_types, ElementsAre(1));
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

// zlib itself (through Debian's python3) reads what EncodePng writes: a check that does
// not share this file's understanding of deflate.
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
