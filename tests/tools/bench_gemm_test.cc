// astr-bench-gemm (the built binary): --shapes picks the projections it measures, one JSON result
// per shape, row count and weight type; a shape that is not NxK with positive N and K is a usage
// error naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "tests/support/test_util.h"

namespace astr {
namespace {

std::string Bench() { return testing::BinDir() + "/astr-bench-gemm"; }

TEST(BenchGemmTest, ShapesFlagPicksTheProjections) {
  const auto r = testing::RunCommand(Bench() +
                                     " --threads 1 --m 1,4 --shapes 64x96,32x128 --rotate-mb 1 "
                                     "--min-seconds 0.001 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const nlohmann::json& x : j["results"]) {
    shapes.insert({x["n"].get<int64_t>(), x["k"].get<int64_t>()});
    EXPECT_GT(x["gflop_per_s"].get<double>(), 0.0) << x.dump();
  }
  EXPECT_EQ(shapes, (std::set<std::pair<int64_t, int64_t>>{{64, 96}, {32, 128}}));
}

TEST(BenchGemmTest, ABadShapeIsAUsageError) {
  for (const char* bad : {"64x", "0x64", "64x64x1", "64*64"}) {
    const auto r = testing::RunCommand(Bench() + " --shapes " + bad + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find(std::string("'") + bad + "'"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace astr
