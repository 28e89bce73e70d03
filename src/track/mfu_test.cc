#include "track/mfu.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace trainyard::track {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

MfuInput SevenBillionOnEightH100() {
  MfuInput in;
  in.tokens_per_s = 8 * 3000;  // 3,000 tokens/s on each of 8 GPUs
  in.num_params = 7e9;
  in.gpu_type = "H100";
  in.gpu_count = 8;
  return in;
}

TEST(PeakTableTest, HoldsDatasheetDensePeaks) {
  const PeakTable t = PeakTable::NvidiaDatasheets();
  EXPECT_EQ(*t.Peak("H100", "bf16"), 989.5);
  EXPECT_EQ(*t.Peak("H100", "fp8"), 1979);
  EXPECT_EQ(*t.Peak("H100", "tf32"), 494.5);
  EXPECT_EQ(*t.Peak("H100-PCIE", "bf16"), 756.5);
  EXPECT_EQ(*t.Peak("H200", "bf16"), 989.5);
  EXPECT_EQ(*t.Peak("B200", "bf16"), 2250);
  EXPECT_EQ(*t.Peak("A100", "bf16"), 312);
  EXPECT_EQ(*t.Peak("A100", "tf32"), 156);
  EXPECT_EQ(*t.Peak("A10", "bf16"), 125);
  EXPECT_EQ(*t.Peak("L4", "fp8"), 242.5);
  EXPECT_EQ(*t.Peak("L40S", "bf16"), 362.05);
  EXPECT_EQ(*t.Peak("V100", "fp16"), 125);
  EXPECT_EQ(*t.Peak("T4", "fp32"), 8.1);
  EXPECT_THAT(t.GpuTypes(), ElementsAre("A10", "A100", "B200", "H100", "H100-PCIE", "H200", "L4",
                                        "L40S", "T4", "V100", "V100S"));
}

TEST(PeakTableTest, EveryFigureIsPositiveAndFasterAtLowerPrecision) {
  const PeakTable t = PeakTable::NvidiaDatasheets();
  for (const std::string& type : t.GpuTypes()) {
    double previous = std::numeric_limits<double>::infinity();
    for (std::string_view p : kMfuPrecisions) {  // fp8 .. fp32: never faster going down
      Result<double> peak = t.Peak(type, p);
      if (!peak.ok()) continue;
      EXPECT_GT(*peak, 0) << type << " " << p;
      EXPECT_LE(*peak, previous) << type << " " << p;
      previous = *peak;
    }
    EXPECT_TRUE(t.Peak(type, "fp32").ok()) << type;
  }
}

TEST(PeakTableTest, TypesAndPrecisionsAreCanonicalised) {
  const PeakTable t = PeakTable::NvidiaDatasheets();
  EXPECT_EQ(*t.Peak(" h100 ", "BF16"), 989.5);
  EXPECT_EQ(*t.Peak("l40s", " fp8"), 733);
}

TEST(PeakTableTest, UnknownTypeNamesItAndTheKnownOnes) {
  Result<double> r = PeakTable::NvidiaDatasheets().Peak("X999", "bf16");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "no peak TFLOPS known for GPU type \"X999\"; known types: A10, A100, B200, H100, "
            "H100-PCIE, H200, L4, L40S, T4, V100, V100S; set a peak for it to compute MFU");
}

TEST(PeakTableTest, MissingPrecisionNamesWhatTheTypeHas) {
  Result<double> r = PeakTable::NvidiaDatasheets().Peak("A100", "fp8");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "no fp8 peak TFLOPS known for GPU type A100; it has bf16, fp16, tf32, fp32");
  Result<double> bad = PeakTable::NvidiaDatasheets().Peak("A100", "int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "precision: must be one of fp8, bf16, fp16, tf32, fp32, got \"int8\"");
}

TEST(PeakTableTest, SetOverridesAndAddsTypes) {
  PeakTable t = PeakTable::NvidiaDatasheets();
  ASSERT_TRUE(t.Set("h100", "BF16", 800).ok());  // a power-capped fleet
  EXPECT_EQ(*t.Peak("H100", "bf16"), 800);
  EXPECT_EQ(*t.Peak("H100", "fp8"), 1979);  // the rest stays
  ASSERT_TRUE(t.Set("MI300X", "bf16", 1307.4).ok());
  EXPECT_EQ(*t.Peak("mi300x", "bf16"), 1307.4);
  EXPECT_FALSE(PeakTable().Peak("H100", "bf16").ok());  // an empty table knows nothing
}

TEST(PeakTableTest, SetRejectsBadInputAndChangesNothing) {
  PeakTable t = PeakTable::NvidiaDatasheets();
  Status s = t.Set("H100", "bf16", 0);
  EXPECT_EQ(s.message(), "peak TFLOPS of H100 at bf16: must be a number > 0, got 0");
  EXPECT_FALSE(t.Set("H100", "bf16", -1).ok());
  EXPECT_FALSE(t.Set("H100", "bf16", std::nan("")).ok());
  EXPECT_FALSE(t.Set("H100", "bf16", std::numeric_limits<double>::infinity()).ok());
  EXPECT_EQ(t.Set("H100", "int4", 10).message(),
            "precision: must be one of fp8, bf16, fp16, tf32, fp32, got \"int4\"");
  EXPECT_EQ(t.Set("  ", "bf16", 10).message(), "gpu_type: must not be empty");
  EXPECT_EQ(*t.Peak("H100", "bf16"), 989.5);
}

TEST(ComputeMfuTest, SixNEstimate) {
  Result<Mfu> m = ComputeMfu(SevenBillionOnEightH100());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_DOUBLE_EQ(m->value, 6 * 7e9 * 24000 / (8 * 989.5e12));  // ~0.127
  EXPECT_DOUBLE_EQ(m->achieved_tflops, 6 * 7e9 * 3000 / 1e12);   // 126 TFLOP/s per GPU
  EXPECT_EQ(m->peak_tflops, 989.5);
  EXPECT_EQ(m->how, "6N estimate");
}

TEST(ComputeMfuTest, ReportedFlopsPerTokenWinsOverTheEstimate) {
  MfuInput in = SevenBillionOnEightH100();
  in.model_flops_per_token = 5e10;
  in.precision = "fp8";
  Result<Mfu> m = ComputeMfu(in);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_DOUBLE_EQ(m->value, 5e10 * 24000 / (8 * 1979e12));
  EXPECT_EQ(m->peak_tflops, 1979);
  EXPECT_EQ(m->how, "reported FLOPs/token");
}

TEST(ComputeMfuTest, UsesTheGivenTable) {
  PeakTable t = PeakTable::NvidiaDatasheets();
  ASSERT_TRUE(t.Set("H100", "bf16", 840).ok());
  Result<Mfu> m = ComputeMfu(SevenBillionOnEightH100(), t);
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->value, 126.0 / 840);
  EXPECT_EQ(m->peak_tflops, 840);
}

TEST(ComputeMfuTest, ZeroThroughputIsZeroMfu) {
  MfuInput in = SevenBillionOnEightH100();
  in.tokens_per_s = 0;
  Result<Mfu> m = ComputeMfu(in);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->value, 0);
}

TEST(ComputeMfuTest, ErrorsNameTheField) {
  auto message = [](MfuInput in) {
    Result<Mfu> m = ComputeMfu(in);
    EXPECT_FALSE(m.ok());
    return m.ok() ? std::string() : m.status().message();
  };
  MfuInput in = SevenBillionOnEightH100();
  in.num_params.reset();
  EXPECT_EQ(message(in),
            "mfu: needs model_flops_per_token or num_params (for the 6N estimate); got neither");
  in = SevenBillionOnEightH100();
  in.gpu_count = 0;
  EXPECT_EQ(message(in), "mfu: gpu_count: must be >= 1, got 0");
  in = SevenBillionOnEightH100();
  in.tokens_per_s = -1;
  EXPECT_EQ(message(in), "mfu: tokens_per_s: must be a number >= 0, got -1");
  in.tokens_per_s = std::nan("");
  EXPECT_THAT(message(in), HasSubstr("mfu: tokens_per_s: must be a number >= 0"));
  in = SevenBillionOnEightH100();
  in.num_params = 0;
  EXPECT_EQ(message(in), "mfu: num_params: must be a number > 0, got 0");
  in = SevenBillionOnEightH100();
  in.model_flops_per_token = -3;
  EXPECT_EQ(message(in), "mfu: model_flops_per_token: must be a number > 0, got -3");
  in = SevenBillionOnEightH100();
  in.gpu_type = "";
  EXPECT_THAT(message(in), HasSubstr("mfu: gpu_type: missing; the GPU type the run used, one of "
                                     "A10, A100,"));
  in = SevenBillionOnEightH100();
  in.gpu_type = "X999";
  EXPECT_THAT(message(in), HasSubstr("mfu: no peak TFLOPS known for GPU type \"X999\"; known "
                                     "types: A10, A100, B200, H100,"));
  in = SevenBillionOnEightH100();
  in.gpu_type = "V100";
  EXPECT_EQ(message(in), "mfu: no bf16 peak TFLOPS known for GPU type V100; it has fp16, fp32");
  in = SevenBillionOnEightH100();
  in.precision = "int8";
  EXPECT_EQ(message(in),
            "mfu: precision: must be one of fp8, bf16, fp16, tf32, fp32, got \"int8\"");
  in = SevenBillionOnEightH100();
  in.tokens_per_s = 1e300;
  in.num_params = 1e300;
  EXPECT_THAT(message(in), HasSubstr("out of range"));
}

TEST(ComputeMfuTest, UnknownTypeKeepsItsCode) {
  MfuInput in = SevenBillionOnEightH100();
  in.gpu_type = "X999";
  EXPECT_EQ(ComputeMfu(in).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard::track
