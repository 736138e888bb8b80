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
