#include "worker/kv_pool.h"

#include <gtest/gtest.h>

namespace astr {
namespace {

TEST(KvPoolTest, PagesForBytes) {
  // stories260K's shape: 5 layers, 4 kv heads of 8, pages of 16 tokens: K and V in f32 are
  // 2 * 5 * 16 * 4 * 8 * 4 = 20480 bytes a page.
  EXPECT_EQ(KvPool::PagesForBytes(int64_t{1} << 20, 5, 16, 4, 8), 51);  // 1048576 / 20480 = 51.2
  EXPECT_EQ(KvPool::PagesForBytes(20479, 5, 16, 4, 8), 0);
  // A page whose byte size does not fit in int64 (8 * (2^61 + 1) would wrap to 8) holds in no
  // budget, rather than yielding 2^17 pages of 1 MiB.
  EXPECT_EQ(KvPool::PagesForBytes(int64_t{1} << 20, 1, (int64_t{1} << 61) + 1, 1, 1), 0);
  EXPECT_EQ(KvPool::PagesForBytes(int64_t{1} << 40, int64_t{1} << 40, 16, int64_t{1} << 40, 8), 0);
}

// The page groups of KvLayout, by hand for each attention pattern.
TEST(KvPoolTest, LayoutGroupsSlidingLayersBesideGlobalOnes) {
  model::ModelConfig c;
  c.num_layers = 26;  // Gemma 3 1B: layers 5, 11, 17, 23 global, the other 22 sliding (512)
  c.sliding_window = 512;
  c.sliding_window_pattern = 6;
  KvLayout g3 = KvLayout::For(c);
  EXPECT_EQ(g3.slots, 4);          // a page id holds 4 layers
  EXPECT_EQ(g3.window_tables, 6);  // 22 sliding layers in 6 groups of 4 (the last has 2)
  EXPECT_EQ(g3.window, 512);
  EXPECT_EQ(g3.layer_table[5], 0);
  EXPECT_EQ(g3.layer_slot[5], 0);
  EXPECT_EQ(g3.layer_table[23], 0);
  EXPECT_EQ(g3.layer_slot[23], 3);
  EXPECT_EQ(g3.layer_table[0], 1);  // sliding layers 0-3 -> table 1, slots 0-3
  EXPECT_EQ(g3.layer_slot[3], 3);
  EXPECT_EQ(g3.layer_table[4], 2);  // sliding layer 4 is the 5th: table 2, slot 0
  EXPECT_EQ(g3.layer_slot[4], 0);
  EXPECT_EQ(g3.layer_table[6], 2);  // the 6th sliding layer
  EXPECT_EQ(g3.layer_slot[6], 1);
  EXPECT_EQ(g3.layer_table[25], 6);  // the 22nd: table 6, slot 1
  EXPECT_EQ(g3.layer_slot[25], 1);

  c.num_layers = 4;  // Gemma 2: alternating, layer 0 sliding
  c.sliding_window_pattern = 2;
  KvLayout g2 = KvLayout::For(c);
  EXPECT_EQ(g2.slots, 2);
  EXPECT_EQ(g2.window_tables, 1);
  EXPECT_EQ(g2.layer_table, (std::vector<int32_t>{1, 0, 1, 0}));
  EXPECT_EQ(g2.layer_slot, (std::vector<int32_t>{0, 0, 1, 1}));

  c.sliding_window_pattern = 0;  // Mistral: every layer slides: one group, nothing given back
  KvLayout mistral = KvLayout::For(c);
  EXPECT_EQ(mistral.slots, 4);
  EXPECT_EQ(mistral.window_tables, 0);
  EXPECT_EQ(mistral.layer_slot, (std::vector<int32_t>{0, 1, 2, 3}));

  c.sliding_window = 0;  // LLaMA: no window
  KvLayout llama = KvLayout::For(c);
  EXPECT_EQ(llama.slots, 4);
  EXPECT_EQ(llama.window_tables, 0);
  EXPECT_EQ(llama.layer_table, (std::vector<int32_t>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace astr
