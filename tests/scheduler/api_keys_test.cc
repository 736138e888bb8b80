// The API key file's format and errors, key checks, and the per-key rate and concurrency limits
// (scheduler/front/api_keys.h), on a clock the test moves.
#include "scheduler/front/api_keys.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/support/test_util.h"

namespace astr::front {
namespace {

using Clock = ApiKeys::Clock;
using std::chrono::milliseconds;
using testing::TempDir;

std::string Bearer(const std::string& key) { return "Bearer " + key; }

std::shared_ptr<ApiKeys> Load(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  auto keys = ApiKeys::Load(path);
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys.ok() ? *keys : nullptr;
}

TEST(ApiKeysTest, ParsesKeysWithTheirSettingsAndSkipsCommentsAndBlankLines) {
  auto specs = ParseApiKeys(
      "# team keys\n\n  sk-alpha  \nsk-beta name=beta rps=2.5 burst=4 max_concurrent=3\n", "f");
  ASSERT_TRUE(specs.ok()) << specs.status().ToString();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].key, "sk-alpha");
  EXPECT_EQ((*specs)[0].name, "key-3");  // the line number
  EXPECT_EQ((*specs)[0].rps, 0);
  EXPECT_EQ((*specs)[0].max_concurrent, 0);
  EXPECT_EQ((*specs)[1].name, "beta");
  EXPECT_EQ((*specs)[1].rps, 2.5);
  EXPECT_EQ((*specs)[1].burst, 4);
  EXPECT_EQ((*specs)[1].max_concurrent, 3);
}

TEST(ApiKeysTest, BadFilesAreRefusedNamingTheLineAndNeverTheKey) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"", "holds no key"},
      {"# only a comment\n", "holds no key"},
      {"sk-secret-1 rps=fast\n", "line 1: rps must be a number >= 0, got 'fast'"},
      {"sk-secret-1 rps=-1\n", "line 1: rps must be a number >= 0"},
      {"\nsk-secret-1 colour=red\n", "line 2: unknown setting 'colour'"},
      {"sk-secret-1 oops\n", "line 1: 'oops' is not NAME=VALUE"},
      {"sk-secret-1 max_concurrent=1.5\n", "max_concurrent must be a whole number"},
      {"sk-secret-1 burst=0.5\n", "burst must be at least 1"},
      {"sk-secret-1 name=a\nsk-secret-2 name=a\n", "line 2: name 'a' is used on line 1 too"},
      {"sk-secret-1 name=a\nsk-secret-1 name=b\n", "line 2: the key of 'a' again"},
  };
  for (const Case& c : cases) {
    auto specs = ParseApiKeys(c.text, "keys.txt");
    ASSERT_FALSE(specs.ok()) << c.text;
    EXPECT_EQ(specs.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(specs.status().message().find(c.message), std::string::npos)
        << specs.status().message();
    EXPECT_NE(specs.status().message().find("keys.txt"), std::string::npos);
    EXPECT_EQ(specs.status().message().find("sk-secret"), std::string::npos)
        << specs.status().message();
  }
}

TEST(ApiKeysTest, ConstantTimeEqualIsPlainEquality) {
  EXPECT_TRUE(ConstantTimeEqual("", ""));
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEqual("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("", "a"));
  // A prefix padded with NULs is not the key.
  EXPECT_FALSE(ConstantTimeEqual(std::string("ab\0", 3), "ab"));
}

TEST(ApiKeysTest, NoKeyFileLetsEveryCallIn) {
  ApiKeys none;
  EXPECT_FALSE(none.required());
  EXPECT_TRUE(none.Admit(nullptr, true).ok());
}

TEST(ApiKeysTest, MissingMalformedAndWrongKeysAreUnauthenticated) {
  auto keys = Load(TempDir("api_keys") + "/keys", "sk-right\n");
  ASSERT_NE(keys, nullptr);
  EXPECT_TRUE(keys->required());
  const std::string wrong = Bearer("sk-wrong"), bare = "sk-right", right = Bearer("sk-right");
  for (const std::string* auth : {static_cast<const std::string*>(nullptr), &wrong, &bare}) {
    auto r = keys->Admit(auth, false);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
    EXPECT_EQ(r.status().message().find("sk-"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(keys->Admit(&right, false).ok());
}

TEST(ApiKeysTest, TheClientIsTheKeyWhenThereIsOneElseTheConnection) {
  ApiKeys none;
  auto anonymous = none.Admit(nullptr, true);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->ClientName("ipv4:127.0.0.1:4000"), "peer ipv4:127.0.0.1:4000");
  auto keys = Load(TempDir("api_keys") + "/keys", "sk-a name=team-a\n");
  ASSERT_NE(keys, nullptr);
  const std::string a = Bearer("sk-a");
  auto keyed = keys->Admit(&a, true);
  ASSERT_TRUE(keyed.ok());
  EXPECT_EQ(keyed->ClientName("ipv4:127.0.0.1:4000"), "key team-a");
  keyed->Release();
  EXPECT_EQ(keyed->ClientName("p"), "peer p");
}

TEST(ApiKeysTest, RateIsATokenBucketPerKey) {
  auto keys = Load(TempDir("api_keys") + "/keys", "sk-a name=a rps=2 burst=3\nsk-b name=b\n");
  ASSERT_NE(keys, nullptr);
  const std::string a = Bearer("sk-a"), b = Bearer("sk-b");
  const Clock::time_point t0 = Clock::now() + std::chrono::hours(1);
  // The burst, then refusals; key b is not limited and not affected.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(keys->Admit(&a, false, t0).ok()) << i;
  auto over = keys->Admit(&a, false, t0);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("'a'"), std::string::npos) << over.status().message();
  EXPECT_NE(over.status().message().find("2 calls per second"), std::string::npos);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(keys->Admit(&b, false, t0).ok());
  // 2 per second: after 499 ms no call is earned, after 500 ms one.
  EXPECT_FALSE(keys->Admit(&a, false, t0 + milliseconds(499)).ok());
  EXPECT_TRUE(keys->Admit(&a, false, t0 + milliseconds(500)).ok());
  EXPECT_FALSE(keys->Admit(&a, false, t0 + milliseconds(500)).ok());
  // A long pause refills to the burst, not beyond.
  const auto later = t0 + std::chrono::seconds(60);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(keys->Admit(&a, false, later).ok()) << i;
  EXPECT_FALSE(keys->Admit(&a, false, later).ok());
}

TEST(ApiKeysTest, ConcurrencyCountsGenerationsUntilTheirLeaseEnds) {
  auto keys = Load(TempDir("api_keys") + "/keys", "sk-c name=c max_concurrent=2\n");
  ASSERT_NE(keys, nullptr);
  const std::string c = Bearer("sk-c");
  auto first = keys->Admit(&c, true);
  auto second = keys->Admit(&c, true);
  ASSERT_TRUE(first.ok() && second.ok());
  auto third = keys->Admit(&c, true);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("already has 2 generations open"), std::string::npos)
      << third.status().message();
  // Other calls (tokenize, model info) do not take a slot.
  EXPECT_TRUE(keys->Admit(&c, false).ok());
  first->Release();
  first->Release();  // twice is once
  auto again = keys->Admit(&c, true);
  EXPECT_TRUE(again.ok());
  EXPECT_FALSE(keys->Admit(&c, true).ok());
  { ApiKeys::Lease gone = std::move(*second); }  // destroyed: given back
  EXPECT_TRUE(keys->Admit(&c, true).ok());
}

TEST(ApiKeysTest, ReloadKeepsOpenCountsOfKeysThatStayAndDropsRemovedKeys) {
  const std::string path = TempDir("api_keys") + "/keys";
  auto keys = Load(path, "sk-stay name=stay max_concurrent=1\nsk-gone name=gone\n");
  ASSERT_NE(keys, nullptr);
  const std::string stay = Bearer("sk-stay"), gone = Bearer("sk-gone"), fresh = Bearer("sk-new");
  auto held = keys->Admit(&stay, true);
  ASSERT_TRUE(held.ok());
  std::ofstream(path) << "sk-stay name=stay max_concurrent=1\nsk-new name=new\n";
  ASSERT_TRUE(keys->Reload().ok());
  EXPECT_FALSE(keys->Admit(&stay, true).ok()) << "the open generation still counts";
  EXPECT_EQ(keys->Admit(&gone, false).status().code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(keys->Admit(&fresh, false).ok());
  held->Release();
  EXPECT_TRUE(keys->Admit(&stay, true).ok());
  // A bad file on reload changes nothing.
  std::ofstream(path) << "sk-x rps=oops\n";
  Status bad = keys->Reload();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(keys->Admit(&fresh, false).ok());
}

}  // namespace
}  // namespace astr::front
