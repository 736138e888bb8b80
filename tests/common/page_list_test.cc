// PageList over a counting fake pool: every page a list took comes back exactly once, whether the
// list is destroyed, moved over, or released, and a moved-from list returns nothing.
#include "common/base/page_list.h"

#include <gtest/gtest.h>

#include <span>
#include <utility>
#include <vector>

namespace astr {
namespace {

using Pages = std::vector<int32_t>;

// Hands out ids 0, 1, 2, ... and never reuses one, so a page returned twice shows up as a
// reference count below zero, and a page never returned as one still above zero.
class CountingPool {
 public:
  explicit CountingPool(int64_t num_pages) : refs_(num_pages, 0) {}
  int64_t held() const { return next_ - returned_; }
  int32_t refs(int32_t page) const { return refs_[page]; }
  int64_t unref_calls() const { return unref_calls_; }
  PageList<CountingPool> NewList() { return PageList<CountingPool>(this); }

 private:
  friend class PageList<CountingPool>;
  bool Take(int64_t count, std::vector<int32_t>* out) {
    if (next_ + count > static_cast<int64_t>(refs_.size())) return false;
    for (int64_t i = 0; i < count; ++i) {
      refs_[next_] = 1;
      out->push_back(static_cast<int32_t>(next_++));
    }
    return true;
  }
  void AddRef(int32_t page) { ++refs_[page]; }
  void Unref(std::span<const int32_t> pages) {
    ++unref_calls_;
    for (int32_t p : pages) {
      if (--refs_[p] == 0) ++returned_;
    }
  }

  std::vector<int32_t> refs_;
  int64_t next_ = 0;
  int64_t returned_ = 0;
  int64_t unref_calls_ = 0;
};

TEST(PageListTest, DestructionReturnsEveryPage) {
  CountingPool pool(8);
  {
    PageList<CountingPool> a = pool.NewList();
    ASSERT_TRUE(a.GrowTo(3));
    ASSERT_TRUE(a.GrowTo(5));  // grows by 2, keeps the first 3
    EXPECT_EQ(a.pages(), (Pages{0, 1, 2, 3, 4}));
    EXPECT_EQ(pool.held(), 5);
  }
  EXPECT_EQ(pool.held(), 0);
  for (int32_t p = 0; p < 5; ++p) EXPECT_EQ(pool.refs(p), 0) << "page " << p;
}

TEST(PageListTest, FailedGrowthTakesNothing) {
  CountingPool pool(4);
  PageList<CountingPool> a = pool.NewList();
  ASSERT_TRUE(a.GrowTo(2));
  EXPECT_FALSE(a.GrowTo(5));
  EXPECT_EQ(a.pages(), (Pages{0, 1}));
  EXPECT_TRUE(a.GrowTo(1));  // already that large
  EXPECT_EQ(a.size(), 2);
  EXPECT_EQ(pool.held(), 2);
}

TEST(PageListTest, MoveAssignmentOverALiveListReturnsItsPages) {
  CountingPool pool(8);
  PageList<CountingPool> a = pool.NewList();
  PageList<CountingPool> b = pool.NewList();
  ASSERT_TRUE(a.GrowTo(2));  // pages 0, 1
  ASSERT_TRUE(b.GrowTo(3));  // pages 2, 3, 4
  b = std::move(a);
  // b's old pages are back; a's pages now belong to b alone.
  for (int32_t p = 2; p < 5; ++p) EXPECT_EQ(pool.refs(p), 0) << "page " << p;
  EXPECT_EQ(b.pages(), (Pages{0, 1}));
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(pool.held(), 2);
  a.Release();  // the moved-from list holds nothing to return
  EXPECT_EQ(pool.refs(0), 1);
  EXPECT_EQ(pool.refs(1), 1);
}

TEST(PageListTest, MovedListReturnsItsPagesOnce) {
  CountingPool pool(8);
  {
    PageList<CountingPool> a = pool.NewList();
    ASSERT_TRUE(a.GrowTo(3));
    PageList<CountingPool> b = std::move(a);
    EXPECT_EQ(b.pool(), &pool);
    EXPECT_EQ(pool.held(), 3);
  }
  EXPECT_EQ(pool.held(), 0);
  EXPECT_EQ(pool.unref_calls(), 1);  // only b returned pages
  for (int32_t p = 0; p < 3; ++p) EXPECT_EQ(pool.refs(p), 0) << "page " << p;
}

TEST(PageListTest, ExplicitReleaseReturnsOnceAndKeepsTheBinding) {
  CountingPool pool(8);
  {
    PageList<CountingPool> a = pool.NewList();
    ASSERT_TRUE(a.GrowTo(2));
    a.Release();
    EXPECT_EQ(a.size(), 0);
    EXPECT_EQ(pool.held(), 0);
    a.Release();  // nothing left: no second return
    EXPECT_EQ(pool.unref_calls(), 1);
    EXPECT_EQ(a.pool(), &pool);
    ASSERT_TRUE(a.GrowTo(1));  // still bound: grows again (fresh id 2 from this pool)
    EXPECT_EQ(a.pages(), (Pages{2}));
  }
  EXPECT_EQ(pool.held(), 0);
  EXPECT_EQ(pool.unref_calls(), 2);
  for (int32_t p = 0; p < 3; ++p) EXPECT_EQ(pool.refs(p), 0) << "page " << p;
}

TEST(PageListTest, SharedPageIsReturnedByEachHolder) {
  CountingPool pool(8);
  PageList<CountingPool> a = pool.NewList();
  ASSERT_TRUE(a.GrowTo(1));
  {
    PageList<CountingPool> b = pool.NewList();
    b.AppendShared(a.pages()[0]);
    EXPECT_EQ(pool.refs(0), 2);
  }
  EXPECT_EQ(pool.refs(0), 1);  // b dropped its reference; a still holds the page
  a.Release();
  EXPECT_EQ(pool.refs(0), 0);
  EXPECT_EQ(pool.held(), 0);
}

TEST(PageListTest, DefaultConstructedListReturnsNothing) {
  PageList<CountingPool> a;
  EXPECT_EQ(a.pool(), nullptr);
  EXPECT_EQ(a.size(), 0);
  a.Release();  // unbound and empty: a no-op
}

}  // namespace
}  // namespace astr
