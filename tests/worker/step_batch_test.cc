// ValidateStepBatch: a well-formed batch passes; every malformed array is refused with its name,
// before any out-of-range read.
#include "worker/step_batch.h"

#include <gtest/gtest.h>

namespace astr {
namespace {

// Two entries: a 3-token prefill on pages {4, 9} (page size 2) and a decode at position 5 of a
// sequence on pages {1, 2, 3}.
StepBatch Good() {
  StepBatch b;
  b.Clear();
  const int32_t prefill[3] = {10, 11, 12};
  const int32_t pages_a[2] = {4, 9};
  b.Append(prefill, 3, 0, pages_a, 2, true);
  const int32_t decode = 13;
  const int32_t pages_b[3] = {1, 2, 3};
  b.Append(&decode, 1, 5, pages_b, 2, true);
  return b;
}

std::string Error(const StepBatch& b) {
  return ValidateStepBatch(b, /*num_pages=*/16, /*page_size=*/2, /*vocab=*/100, /*max_tokens=*/64)
      .message();
}

TEST(StepBatchTest, AppendBuildsTheCsrArrays) {
  StepBatch b = Good();
  EXPECT_EQ(b.qo_indptr, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b.kv_indptr, (std::vector<int32_t>{0, 2, 5}));
  EXPECT_EQ(b.kv_page_indices, (std::vector<int32_t>{4, 9, 1, 2, 3}));
  EXPECT_EQ(b.kv_last_page_len, (std::vector<int32_t>{1, 2}));
  // Slot = page * page_size + offset: positions 0,1 -> page 4; 2 -> page 9; 5 -> page 3, offset 1.
  EXPECT_EQ(b.out_slots, (std::vector<int64_t>{8, 9, 18, 7}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 5}));
  EXPECT_EQ(b.sample_rows, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(ValidateStepBatch(b, 16, 2, 100, 64).ok());
}

// Two window tables: the entry's window ids start at page 1 (page 0 lies behind every query's
// window and reads as page 0); each table gets its own out slots.
TEST(StepBatchTest, WindowTablesFollowTheirOwnPages) {
  StepBatch b;
  b.set_window_tables(2);
  b.Clear();
  const int32_t tokens[2] = {10, 11};
  const int32_t pages[3] = {4, 9, 5};
  const int32_t window[4] = {7, 8, 12, 13};  // page 1 -> (7, 8), page 2 -> (12, 13)
  b.Append(tokens, 2, 3, pages, 2, true, window, /*window_first=*/1);
  EXPECT_EQ(b.kv_page_indices, (std::vector<int32_t>{4, 9, 5}));
  EXPECT_EQ(b.window_page_indices[0], (std::vector<int32_t>{0, 7, 12}));
  EXPECT_EQ(b.window_page_indices[1], (std::vector<int32_t>{0, 8, 13}));
  // Positions 3 (page 1, offset 1) and 4 (page 2, offset 0).
  EXPECT_EQ(b.out_slots, (std::vector<int64_t>{19, 10}));
  EXPECT_EQ(b.window_out_slots[0], (std::vector<int64_t>{15, 24}));
  EXPECT_EQ(b.window_out_slots[1], (std::vector<int64_t>{17, 26}));
  EXPECT_TRUE(ValidateStepBatch(b, 16, 2, 100, 64).ok());
  StepBatch bad = b;
  bad.window_page_indices[1][2] = 16;
  EXPECT_NE(Error(bad).find("window_page_indices[1] holds page 16"), std::string::npos)
      << Error(bad);
  bad = b;
  bad.window_out_slots[0][1] = 25;
  EXPECT_NE(Error(bad).find("window_out_slots[0][1] does not match"), std::string::npos)
      << Error(bad);
  bad = b;
  bad.window_page_indices[0].pop_back();
  EXPECT_NE(Error(bad).find("window_page_indices[0] size != kv_page_indices size"),
            std::string::npos)
      << Error(bad);
  b.Clear();  // the tables stay, empty
  EXPECT_EQ(b.num_window_tables(), 2);
  EXPECT_TRUE(b.window_page_indices[0].empty());
}

TEST(StepBatchTest, MalformedArraysAreNamed) {
  struct Case {
    const char* expect;
    void (*mutate)(StepBatch&);
  };
  const Case cases[] = {
      {"token_ids[1]", [](StepBatch& b) { b.token_ids[1] = 100; }},
      {"kv_page_indices", [](StepBatch& b) { b.kv_page_indices[0] = 16; }},
      {"qo_indptr decreases",
       [](StepBatch& b) {
         b.qo_indptr = {0, 5, 4};
       }},
      {"qo_indptr decreases",
       [](StepBatch& b) {
         b.qo_indptr = {0, 2, 1};
         b.qo_indptr[2] = 4;
         b.qo_indptr[1] = 5;
       }},
      {"kv_indptr",
       [](StepBatch& b) {
         b.kv_indptr = {0, 9, 5};
       }},
      {"positions", [](StepBatch& b) { b.positions.pop_back(); }},
      {"out_slots[3]", [](StepBatch& b) { b.out_slots[3] = 6; }},
      {"kv_last_page_len", [](StepBatch& b) { b.kv_last_page_len[0] = 3; }},
      {"not contiguous", [](StepBatch& b) { b.positions[1] = 0; }},
      {"sample_rows", [](StepBatch& b) { b.sample_rows.push_back(4); }},
      {"workspace", [](StepBatch& b) { b.token_ids.resize(65, 1); }},
  };
  for (const Case& c : cases) {
    StepBatch b = Good();
    c.mutate(b);
    const std::string err = Error(b);
    EXPECT_NE(err.find(c.expect), std::string::npos) << "want '" << c.expect << "', got: " << err;
  }
}

}  // namespace
}  // namespace astr
