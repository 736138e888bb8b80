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

}  // namespace
}  // namespace astr
