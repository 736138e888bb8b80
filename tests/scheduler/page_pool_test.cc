// PagePool and its PageLists: allocation order, all-or-nothing growth, RAII return, reference
// counts, exhaustion.
#include "scheduler/page_pool.h"

#include <gtest/gtest.h>

#include <utility>

namespace astr::sched {
namespace {

using Pages = std::vector<int32_t>;

TEST(PagePoolTest, FreshPoolHandsOutLowestIdsFirst) {
  PagePool pool(8, 4);
  EXPECT_EQ(pool.num_pages(), 8);
  EXPECT_EQ(pool.page_size(), 4);
  EXPECT_EQ(pool.capacity_tokens(), 32);
  PageList<PagePool> a = pool.NewList();
  ASSERT_TRUE(a.GrowTo(3));
  EXPECT_EQ(a.pages(), (Pages{0, 1, 2}));
  PageList<PagePool> b = pool.NewList();
  ASSERT_TRUE(b.GrowTo(2));
  EXPECT_EQ(b.pages(), (Pages{3, 4}));
  EXPECT_EQ(pool.num_free(), 3);
  for (int32_t p = 0; p < 5; ++p) EXPECT_EQ(pool.refcount(p), 1) << "page " << p;
  for (int32_t p = 5; p < 8; ++p) EXPECT_EQ(pool.refcount(p), 0) << "page " << p;
}

TEST(PagePoolTest, PagesForRoundsUp) {
  PagePool pool(8, 4);
  EXPECT_EQ(pool.PagesFor(0), 0);
  EXPECT_EQ(pool.PagesFor(1), 1);
  EXPECT_EQ(pool.PagesFor(4), 1);
  EXPECT_EQ(pool.PagesFor(5), 2);
  EXPECT_EQ(pool.PagesFor(32), 8);
}

TEST(PagePoolTest, GrowthIsAllOrNothingAndIncremental) {
  PagePool pool(4, 16);
  PageList<PagePool> a = pool.NewList();
  ASSERT_TRUE(a.GrowTo(1));
  EXPECT_FALSE(a.GrowTo(5));  // needs 4 more, 3 free
  EXPECT_EQ(a.pages(), (Pages{0}));
  EXPECT_EQ(pool.num_free(), 3);
  ASSERT_TRUE(a.GrowTo(2));
  EXPECT_EQ(a.pages(), (Pages{0, 1}));
  EXPECT_TRUE(a.GrowTo(1));  // never shrinks
  EXPECT_EQ(a.size(), 2);
}

TEST(PagePoolTest, DestroyingAnAllocationReturnsItsPages) {
  PagePool pool(6, 2);
  {
    PageList<PagePool> a = pool.NewList();
    ASSERT_TRUE(a.GrowTo(4));
    EXPECT_EQ(pool.num_free(), 2);
  }
  EXPECT_EQ(pool.num_free(), 6);
  for (int32_t p = 0; p < 6; ++p) EXPECT_EQ(pool.refcount(p), 0);
}

TEST(PagePoolTest, ReleaseKeepsTheBindingAndRegrowsTheSameIds) {
  PagePool pool(6, 2);
  PageList<PagePool> a = pool.NewList();
  ASSERT_TRUE(a.GrowTo(3));
  a.Release();
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(pool.num_free(), 6);
  EXPECT_EQ(a.pool(), &pool);
  ASSERT_TRUE(a.GrowTo(3));
  EXPECT_EQ(a.pages(), (Pages{0, 1, 2}));
}

TEST(PagePoolTest, MovedAllocationReturnsPagesOnce) {
  PagePool pool(4, 4);
  PageList<PagePool> a = pool.NewList();
  ASSERT_TRUE(a.GrowTo(2));
  PageList<PagePool> b = std::move(a);
  EXPECT_EQ(b.pages(), (Pages{0, 1}));
  EXPECT_EQ(pool.num_free(), 2);
  PageList<PagePool> c = pool.NewList();
  ASSERT_TRUE(c.GrowTo(1));
  c = std::move(b);  // c's own page 2 is returned first
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(c.pages(), (Pages{0, 1}));
  c.Release();
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(PagePoolTest, SharedPageIsFreedByItsLastHolder) {
  PagePool pool(4, 4);
  PageList<PagePool> a = pool.NewList();
  ASSERT_TRUE(a.GrowTo(2));
  PageList<PagePool> b = pool.NewList();
  b.AppendShared(a.pages()[0]);  // a prefix-cache hit on a's first page
  ASSERT_TRUE(b.GrowTo(2));
  EXPECT_EQ(b.pages(), (Pages{0, 2}));
  EXPECT_EQ(pool.refcount(0), 2);
  EXPECT_EQ(pool.num_free(), 1);
  a.Release();
  EXPECT_EQ(pool.refcount(0), 1);
  EXPECT_EQ(pool.refcount(1), 0);
  EXPECT_EQ(pool.num_free(), 2);  // page 1 only; page 0 still held by b
  b.Release();
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(PagePoolTest, ExhaustionThenReuse) {
  PagePool pool(3, 1);
  PageList<PagePool> a = pool.NewList();
  PageList<PagePool> b = pool.NewList();
  ASSERT_TRUE(a.GrowTo(2));
  ASSERT_TRUE(b.GrowTo(1));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_FALSE(b.GrowTo(2));
  a.Release();
  ASSERT_TRUE(b.GrowTo(3));
  EXPECT_EQ(b.pages(), (Pages{2, 0, 1}));  // freed pages come back lowest id first
  EXPECT_EQ(pool.num_free(), 0);
}

}  // namespace
}  // namespace astr::sched
