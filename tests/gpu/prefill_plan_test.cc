// Host-side planning of the paged prefill (kernels/cuda/paged_prefill.h): the work-item list of
// BuildPrefillPlan, the MaxPrefillTiles bound, and the argument checks that run before any CUDA
// call. Runs on the CPU.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/paged_prefill.h"

namespace astr::cuda {
namespace {

struct Tile {
  int entry;
  int row_begin;
  bool operator==(const Tile&) const = default;
};

std::vector<Tile> Tiles(const PrefillPlan& plan) {
  EXPECT_EQ(plan.tile_entry.size(), plan.tile_row_begin.size());
  std::vector<Tile> out;
  for (int i = 0; i < plan.num_tiles(); ++i)
    out.push_back({plan.tile_entry[i], plan.tile_row_begin[i]});
  return out;
}

std::vector<Tile> Plan(const std::vector<int32_t>& qo_indptr, int head_dim = 128) {
  return Tiles(
      BuildPrefillPlan(qo_indptr.data(), static_cast<int>(qo_indptr.size()) - 1, head_dim));
}

void PrintTo(const Tile& t, std::ostream* os) {
  *os << "{" << t.entry << ", " << t.row_begin << "}";
}

// The expected tiles below are written for 64-row tiles.
TEST(PrefillPlanTest, TileRowsAre64ForEverySupportedHeadDim) {
  for (int d : {32, 64, 128, 256}) EXPECT_EQ(PrefillTileRows(d), 64) << d;
}

TEST(PrefillPlanTest, LongestEntriesFirstLastTileFirst) {
  // Entry lengths 10, 140, 0, 1, 128.
  // 140 rows [10, 150): tiles at 10, 74, 138 (the last one 12 rows), emitted last first.
  // 128 rows [151, 279): tiles at 151, 215. Then 10 rows at 0, 1 row at 150; entry 2 has none.
  const std::vector<Tile> want = {{1, 138}, {1, 74}, {1, 10}, {4, 215}, {4, 151}, {0, 0}, {3, 150}};
  EXPECT_EQ(Plan({0, 10, 150, 150, 151, 279}), want);
}

TEST(PrefillPlanTest, TiesKeepBatchOrder) {
  EXPECT_EQ(Plan({0, 5, 10, 15}), (std::vector<Tile>{{0, 0}, {1, 5}, {2, 10}}));
  // 64-row entries tie with each other; the 65-row entry (2 tiles) goes first.
  EXPECT_EQ(Plan({0, 64, 129, 193}), (std::vector<Tile>{{1, 128}, {1, 64}, {0, 0}, {2, 129}}));
}

TEST(PrefillPlanTest, PartialLastTile) {
  EXPECT_EQ(Plan({0, 64}), (std::vector<Tile>{{0, 0}}));
  EXPECT_EQ(Plan({0, 65}), (std::vector<Tile>{{0, 64}, {0, 0}}));
  EXPECT_EQ(Plan({0, 63}), (std::vector<Tile>{{0, 0}}));
  // Entry 1: 513 rows starting at row 7, tiles at 7 + 64 i for i = 8 (a single row) down to 0;
  // then entry 0 (7 rows).
  std::vector<Tile> want;
  for (int i = 8; i >= 0; --i) want.push_back({1, 7 + 64 * i});
  want.push_back({0, 0});
  EXPECT_EQ(Plan({0, 7, 520}), want);
}

TEST(PrefillPlanTest, EmptyBatchesAndEntries) {
  EXPECT_TRUE(Plan({0}).empty());
  EXPECT_TRUE(Plan({0, 0, 0, 0}).empty());
  EXPECT_EQ(Plan({0, 0, 3, 3}), (std::vector<Tile>{{1, 0}}));
  // A malformed decreasing indptr gives no tiles for that entry (never a negative count).
  EXPECT_EQ(Plan({0, 4, 2, 3}), (std::vector<Tile>{{0, 0}, {2, 2}}));
}

TEST(PrefillPlanTest, OneRowEntries) {
  // Decode-like entries: one tile each, in batch order after the longer entry.
  EXPECT_EQ(Plan({0, 1, 2, 70, 71}), (std::vector<Tile>{{2, 66}, {2, 2}, {0, 0}, {1, 1}, {3, 70}}));
}

TEST(PrefillPlanTest, MaxTilesHandValues) {
  // K = min(batch, tokens); bound = K + (tokens - K) / 64.
  EXPECT_EQ(MaxPrefillTiles(8192, 256, 128), 256 + 7936 / 64);  // 380
  EXPECT_EQ(MaxPrefillTiles(100, 256, 128), 100);               // 100 one-row entries
  EXPECT_EQ(MaxPrefillTiles(64, 1, 64), 1);
  EXPECT_EQ(MaxPrefillTiles(65, 1, 64), 2);
  EXPECT_EQ(MaxPrefillTiles(129, 2, 64), 2 + 127 / 64);  // {1, 128}: 1 + 2 = 3
  EXPECT_EQ(MaxPrefillTiles(0, 8, 64), 0);
  EXPECT_EQ(MaxPrefillTiles(8, 0, 64), 0);
}

// The worst case of the proof in prefill_plan.cc reaches the bound exactly.
TEST(PrefillPlanTest, MaxTilesReachedByWorstCase) {
  for (int max_tokens : {1, 2, 63, 64, 65, 127, 128, 129, 1000, 8192}) {
    for (int max_batch : {1, 2, 3, 17, 64, 256, 2000}) {
      const int k = std::min(max_batch, max_tokens);
      std::vector<int32_t> indptr = {0};
      for (int i = 0; i < k - 1; ++i) indptr.push_back(indptr.back() + 1);
      indptr.push_back(max_tokens);  // the last entry takes max_tokens - k + 1 rows
      const int tiles = static_cast<int>(Plan(indptr).size());
      EXPECT_EQ(tiles, MaxPrefillTiles(max_tokens, max_batch, 128))
          << "tokens " << max_tokens << " batch " << max_batch;
    }
  }
}

TEST(PrefillPlanTest, MaxTilesBoundsRandomBatches) {
  std::mt19937 rng(12345);
  for (int iter = 0; iter < 3000; ++iter) {
    const int max_tokens = std::uniform_int_distribution<int>(1, 3000)(rng);
    const int max_batch = std::uniform_int_distribution<int>(1, 300)(rng);
    const int batch = std::uniform_int_distribution<int>(1, max_batch)(rng);
    // Random lengths (many short and empty entries, some long) scaled to fit max_tokens.
    std::vector<int32_t> indptr = {0};
    int left = std::uniform_int_distribution<int>(0, max_tokens)(rng);
    for (int b = 0; b < batch; ++b) {
      const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
      int len = kind == 0 ? 0 : kind == 1 ? 1 : std::uniform_int_distribution<int>(0, left)(rng);
      len = std::min(len, left);
      left -= len;
      indptr.push_back(indptr.back() + len);
    }
    const PrefillPlan plan = BuildPrefillPlan(indptr.data(), batch, 64);
    ASSERT_LE(plan.num_tiles(), MaxPrefillTiles(max_tokens, max_batch, 64))
        << "iter " << iter << " tokens " << max_tokens << " batch " << max_batch;
    // Every row of every entry is covered exactly once.
    std::vector<int> cover(indptr.back(), 0);
    for (int i = 0; i < plan.num_tiles(); ++i) {
      const int b = plan.tile_entry[i];
      const int end = std::min(plan.tile_row_begin[i] + 64, indptr[b + 1]);
      ASSERT_GE(plan.tile_row_begin[i], indptr[b]);
      ASSERT_LT(plan.tile_row_begin[i], end);
      for (int t = plan.tile_row_begin[i]; t < end; ++t) ++cover[t];
    }
    for (int t = 0; t < indptr.back(); ++t) ASSERT_EQ(cover[t], 1) << "row " << t;
  }
}

TEST(PrefillPlanTest, SupportedDims) {
  const char* why = nullptr;
  for (int d : {32, 64, 128, 256}) {
    EXPECT_TRUE(SupportsPagedPrefill({32, 8, d, 0, 0.1f}, &why)) << d;
  }
  EXPECT_FALSE(SupportsPagedPrefill({32, 8, 96, 0, 0.1f}, &why));
  EXPECT_NE(std::string(why).find("head_dim"), std::string::npos);
  EXPECT_FALSE(SupportsPagedPrefill({12, 8, 128, 0, 0.1f}, &why));  // 12 % 8 != 0
  EXPECT_NE(std::string(why).find("num_kv_heads"), std::string::npos);
  EXPECT_FALSE(SupportsPagedPrefill({0, 0, 128, 0, 0.1f}, &why));
  EXPECT_FALSE(SupportsPagedPrefill({8, 8, 128, -1, 0.1f}, &why));
  EXPECT_TRUE(SupportsPagedPrefill({28, 4, 128, 4096, 0.1f}, nullptr));  // group of 7
}

// Argument checks return before any CUDA call, so they run without a GPU.
TEST(PrefillPlanTest, LaunchRejectsBadArgumentsWithoutTouchingTheGpu) {
  PagedPrefillArgs args;
  args.dims = {8, 2, 96, 0, 0.1f};
  args.num_tiles = 1;
  EXPECT_EQ(LaunchPagedPrefill(args, nullptr), cudaErrorInvalidValue);  // head_dim 96
  args.dims.head_dim = 128;
  EXPECT_EQ(LaunchPagedPrefill(args, nullptr), cudaErrorInvalidValue);  // null pointers
  args.num_tiles = 0;
  EXPECT_EQ(LaunchPagedPrefill(args, nullptr), cudaSuccess);  // nothing to launch
  EXPECT_EQ(LaunchAppendKv(nullptr, nullptr, 0, nullptr, 0, 2, 128, PagedKv{}, nullptr),
            cudaSuccess);  // no rows
  EXPECT_EQ(LaunchAppendKv(nullptr, nullptr, 0, nullptr, 3, 2, 128, PagedKv{}, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace astr::cuda
